"""How a real run's ranks exchange, one module per exchange, behind one small interface
(:class:`~.base.Exchange`), named by each algorithm's record:

- :mod:`.native`: gradient averaging through the native core's partial collectives (sync, eager-SGD);
- :mod:`.wagma`: group model averaging through the native core (WAGMA-SGD);
- :mod:`.torch_sync`: sync through ``torch.distributed`` (gloo on CPU, NCCL on GPU), the baseline a user would
  otherwise run (``stragglerlab run --backend torch``);
- :mod:`.local_sgd` and :mod:`.lsgd`: model averaging and leader pulls with plain MPI collectives (mpi4py);
- :mod:`.server`: a parameter server as a thread of rank 0, over plain MPI point to point (async-ps, EASGD);
- :mod:`.gossip`: d-psgd's and sgp's model exchanges with their peers, MPI point to point (mpi4py);
- :mod:`.adpsgd`: ad-psgd's pairwise averages, MPI point to point with a communication thread per rank.
"""
