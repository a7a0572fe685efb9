"""The discrete-event simulator of data-parallel SGD with stragglers (DESIGN §2, §4–§6)."""
