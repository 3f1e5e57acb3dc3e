"""Training jobs: models (:mod:`.model`), layouts and pipeline schedules (:mod:`.parallel`), traces (:mod:`.job`).

The ``transformer`` workload generator (:mod:`etsim.producers.workloads.transformer`) writes them.
"""
