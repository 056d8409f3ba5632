"""Host pods: run one of rblnctl's read-only host commands on cluster nodes, as short-lived pods pinned to them.

spec.py builds the pod (nodeName, every taint tolerated, the node's directories mounted read-only
under /host, non-root, no privileges); runner.py creates at most N at once, watches them (one
label-selected watch for the whole run: rblnctl.kube.watch), reads each finished pod's log and always
deletes what it made.
`rblnctl preflight --hosts` (rblnctl.preflight.hosts) and `rblnctl vfio status --node`
(rblnctl.hostpods.vfio) use it.
"""
