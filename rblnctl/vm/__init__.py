"""KubeVirt VMs and their NPUs: give a VM its NPUs (sandbox or DRA), list them, and say why a VM has none.

`devices` is the one module that knows the VM spec shape; `cluster` reads what a plan needs from the
cluster; `attach` plans and applies attach/detach (and re-expressing a VM's NPUs with the other
method); `restart` stops and starts a VM through virt-api; `manifest`, `listing` and `diagnose`
build, list and explain. Import from the submodules.
"""
