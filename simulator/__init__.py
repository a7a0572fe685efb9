"""The discrete-event simulator of data-parallel SGD with stragglers."""
