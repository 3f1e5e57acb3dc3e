"""Several jobs on one cluster: shared links, placements, stragglers and faults (``docs/cluster.md``).

Typical use::

    from etsim.cluster import load_cluster, run_cluster

    result = run_cluster(load_cluster("experiments/cluster_two_jobs.yaml"), alone=True)
    for job in result.jobs:
        print(job.name, job.duration_ns, job.slowdown)

- :func:`load_cluster` reads and checks a cluster file (:mod:`etsim.cluster.spec`);
- :func:`run_cluster` runs it: the jobs as one workload on the shared network (:mod:`etsim.cluster.merge`),
  placed by :mod:`etsim.cluster.placement`, each job's view of the run, and the links jobs shared.
"""

from etsim.cluster.run import ClusterResult, JobResult, run_cluster
from etsim.cluster.spec import ClusterSpec, load_cluster

__all__ = ["ClusterResult", "ClusterSpec", "JobResult", "load_cluster", "run_cluster"]
