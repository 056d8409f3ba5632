"""Change how VMs get NPUs, cluster-wide: the Sandbox Device Plugin <-> DRA (the allocation method).

The operator's documentation asks for every VM holding an NPU to be shut down first, then the
policy to change. rblnctl does the checkable part:
1. refuse while a running VirtualMachineInstance holds NPUs through the allocator the change turns off, or
   through the method its VM is converted from (the running-VM guard, rblnctl.vm.guard), naming each one;
   a VM already on the target method depends on nothing the change does;
2. check what the target method needs: Kubernetes and KubeVirt versions (constants MIN_KUBERNETES /
   MIN_KUBEVIRT), KubeVirt's gates (rblnctl.kubevirt.gates), an operator release that deploys it
   (MIN_OPERATOR), and for DRA the resource.k8s.io API and a DRA driver with VFIO support
   (rblnctl.operator.dra; the driver itself and its DeviceClass arrive with the switch);
3. patch the active RBLNClusterPolicy so exactly one VM allocator is enabled, guarded by its
   resourceVersion. Later operators admit sandboxDevicePlugin and draKubeletPlugin only one at a time,
   and draKubeletPlugin not beside devicePlugin (their CRD's CEL rules; RBLN-SW/rbln-npu-operator later
   main, api/v1beta1 envtest TestRBLNClusterPolicy_CELRejection). Chart v0.3.0 checks nothing
   (config/default/kustomization.yaml: webhook commented out, no x-kubernetes-validations), so rblnctl
   checks the patched policy against the same rules (Policy.admission_problems) before sending it;
4. wait until the operator has rolled the new plugin on every vm-passthrough node and removed the old
   one (rblnctl.operator.convergence.method_pending), and for DRA until its DeviceClass exists: one LIST
   of each kind per round, whatever the cluster size;
5. with convert_vms, re-express each (stopped) VM's NPUs with the new method through the `vm attach`
   library (rblnctl.vm.attach.AttachPlanner, convert=True, keeping each VM's count), once the new
   method is offered. Without it, the VMs still naming the old method are a warning.

A use case over the operator model, KubeVirt, the nodes and the VMs: it sits above all of them
(`rblnctl.operator` never imports it). `plan` decides from facts already read (pure), `changer` reads,
writes and waits.
"""

from rblnctl.method.changer import MethodChanger, MethodState
from rblnctl.method.plan import (
    Conversion,
    MethodEvents,
    MethodFacts,
    MethodOptions,
    MethodPlan,
    MethodResult,
    MethodStep,
    PolicyEdit,
    Prerequisite,
    check_prerequisites,
    npu_holders,
    old_method_vms,
    parse_method,
    plan_edit,
    plan_method,
)

__all__ = [
    "Conversion", "MethodChanger", "MethodEvents", "MethodFacts", "MethodOptions", "MethodPlan", "MethodResult",
    "MethodState", "MethodStep", "PolicyEdit", "Prerequisite", "check_prerequisites", "npu_holders",
    "old_method_vms", "parse_method", "plan_edit", "plan_method",
]
