"""The RBLN NPU Operator as rblnctl models it: the one place its rules are stated.

Which RBLNClusterPolicy is active and what it enables (`policy`), which extended resources each
mode advertises (`resources`), which component a pod or deploy label is and what each mode deploys
(`components`), a node's effective mode (`nodes`), and when the operator has converged a node on a
mode (`convergence`). `cluster` reads what these rules need from the API server. Facts differ per
operator release; docs/operator.md lists them with their sources.
"""
