"""KubeVirt VMs and their NPUs: give a VM its NPUs (sandbox or DRA), list them, say why a VM has none and where
more would fit, and run them.

`devices` is the one module that knows the VM spec shape; `cluster` reads what a plan needs from the
cluster; `attach` plans and applies attach/detach (and re-expressing a VM's NPUs with the other
method); `lifecycle` starts, stops and restarts a VM through virt-api and waits for its NPUs; `fit` says how
many VMs of K NPUs fit now; `manifest`, `listing` and `diagnose` build, list and explain. Import from the
submodules.
"""
