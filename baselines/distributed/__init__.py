"""Training on a Ray cluster and over several learner ranks (the `ray` extra; Ray is imported lazily).

* `cluster.connect`: joins a cluster (`ray.init(address=...)`) or starts a local one;
* `rollout_worker.RolloutWorker`: a Ray actor that builds its own env and plays groups of episodes;
* `ray_rollout.RayRollout`: the rollout protocol of `scope_envs.core.rollout`, played by rollout workers;
* `data_parallel`: one optimizer step data-parallel over `torch.distributed` ranks;
* `learner_group.LearnerGroup`: the ranks of a data-parallel run as Ray actors in a placement group.
"""
