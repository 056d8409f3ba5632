"""`node set-mode --rehearse`: predict a pool switch from one read of the cluster, writing nothing.

Three steps, each its own module, as rblnctl.vm.diagnose does it:

- facts.py reads (every node's set-mode plan as the real run makes it, every Node, every unfinished pod, every
  PodDisruptionBudget, rblnctl's Events on the nodes) into one RehearsalFacts value; nothing else reads;
- plan.py is a pure function of that value: the waves `--max-unavailable` gives, per wave the pods evicted, where
  the scheduler could place each, which PodDisruptionBudgets pace them, which nodes are refused and why, what the
  operator rolls out, and how long each wave takes (with the estimate's basis);
- the CLI renders it (rblnctl.cli.rehearse).
"""
