"""Every label, resource name, PCI ID and version floor rblnctl relies on, in one place.

Names only: the rules that interpret them live in the module that owns each concept
(rblnctl.operator for the RBLN NPU Operator, rblnctl.kubevirt for KubeVirt, rblnctl.host.pci for
PCI). Sources are cited beside each group: the operator (github.com/RBLN-SW/rbln-npu-operator, chart
v0.3.0 = commit cd771db, and its later main), its DRA driver (github.com/RBLN-SW/rbln-k8s-dra-driver),
KubeVirt (github.com/kubevirt/kubevirt), pci.ids (github.com/pciutils/pciids) and the operator's
"Sandboxed workloads" documentation page. docs/operator.md says which facts differ per release.
"""

from __future__ import annotations

# --- Node labels -------------------------------------------------------------------------------

LABEL_PREFIX = "rebellions.ai/"
WORKLOAD_LABEL = "rebellions.ai/npu.workload.config"
MODE_CONTAINER = "container"
MODE_VM = "vm-passthrough"
WORKLOAD_MODES = (MODE_CONTAINER, MODE_VM)
DEFAULT_MODE = MODE_CONTAINER
# What users type on the command line -> the label value the operator understands.
MODE_ALIASES = {"container": MODE_CONTAINER, "vm": MODE_VM, "vm-passthrough": MODE_VM}

NPU_PRESENT_LABEL = "rebellions.ai/npu.present"
DEPLOY_SKIP_LABEL = "rebellions.ai/npu.deploy.skip"
DEPLOY_LABEL_PREFIX = "rebellions.ai/npu.deploy."
NPU_FAMILY_LABEL = "rebellions.ai/npu.family"
NPU_COUNT_LABEL = "rebellions.ai/npu.count"
NPU_PRODUCT_LABEL = "rebellions.ai/npu.product"

# NFD labels that mark a node carrying a Rebellions PCI device (vendor 1eff).
NFD_LABEL_PREFIX = "feature.node.kubernetes.io/"
NFD_NPU_LABELS = (
    "feature.node.kubernetes.io/pci-1eff.present",
    "feature.node.kubernetes.io/pci-1200_1eff.present",
)
NFD_IOMMU_LABEL = "feature.node.kubernetes.io/iommu-enabled"

# Deploy labels: rebellions.ai/npu.deploy.<component>. The operator writes "true" for each component
# of the node's mode and only fills keys that are missing (a user's "false" is an opt-out it keeps);
# k8s-driver-manager (later releases) flips them to "paused-for-driver-upgrade" while it works.
# RBLN-SW/rbln-npu-operator@v0.3.0:internal/scope/cluster_policy.go (rblnComponentLabels,
# updateRBLNComponentLabels); later main: internal/clusterpolicy (restoreStalePausedLabels).
DEPLOY_TRUE = "true"
DEPLOY_OPT_OUT = "false"
DEPLOY_PAUSED = "paused-for-driver-upgrade"
# npu.deploy.driver=pre-installed (the partition line, op@74c5b08 internal/consts/consts.go
# RBLNDeployDriverPreInstalled): the host has its own NPU driver; an admin's value the operator keeps (it only fills
# missing keys), it deploys no driver pod there and, in container mode, drops npu.deploy.rbln-daemon
# (internal/clusterpolicy/node_labels.go desiredComponentLabels).
DEPLOY_PREINSTALLED = "pre-installed"
# Partition labels, the admin's contract (op@74c5b08 internal/consts/consts.go): rebellions.ai/npu.partition for every
# NPU of the node, rebellions.ai/npu.partition.<idx> for one; values vf1 | vf4 | none. A node with any vf1/vf4 is
# partitioned; another value, or a non-numeric index, blocks the gate until fixed (cmd/rbln-validator/gate.go
# nodeIsPartitioned).
PARTITION_LABEL = "rebellions.ai/npu.partition"
PARTITION_INDEX_PREFIX = "rebellions.ai/npu.partition."
PARTITION_MODES = ("vf1", "vf4")
PARTITION_NONE = "none"
# Written by the partition manager once VF partitioning is applied (consts.go PartitionReadyFileName).
PARTITION_READY_MARKER = "partition-ready"
# The init container the partition line gives its gated components: `rbln-validator gate --component <c>`, which
# waits for toolkit-ready, plus partition-ready on partitioned nodes for the components that advertise NPUs
# (cmd/rbln-validator/gate.go componentWaitsForPartition: device-plugin, dra-kubelet-plugin; not metrics-exporter,
# npu-feature-discovery, rbln-daemon, partition-manager). ASSUMPTION (docs/operator.md): the init container's name
# was not seen (buildGateInitContainer's source is not in the public index), so rblnctl recognises it by its
# arguments `gate` and `--component`, not by name.
GATE_SUBCOMMAND = "gate"
GATE_PARTITION_WAITERS = ("device-plugin", "dra-kubelet-plugin")
# Components, by the name their deploy label and DaemonSet carry.
COMP_DRIVER = "driver"
COMP_DEVICE_PLUGIN = "device-plugin"
COMP_DRA = "dra-kubelet-plugin"
COMP_METRICS = "metrics-exporter"
COMP_DAEMON = "rbln-daemon"  # chart v0.2.1-v0.3.0
COMP_SMD = "rbln-smd"  # later releases: the same component renamed
COMP_NFD = "npu-feature-discovery"
COMP_VALIDATOR = "operator-validator"
COMP_TOOLKIT = "container-toolkit"
COMP_VFIO_MANAGER = "vfio-manager"
COMP_SANDBOX = "sandbox-device-plugin"
# The partition line of the operator (later, untagged code: RBLN-SW/rbln-npu-operator op@74c5b08): a partition
# manager that carves REBEL PFs into VFs per the admin's node labels (internal/clusterpolicy/components/
# partition_manager.go: DaemonSet rbln-partition-manager, nodeSelector npu.deploy.partition-manager=true, image
# rebellions/k8s-partition-manager, args reconcile-partition-state; policy key partitionManager).
COMP_PARTITION_MANAGER = "partition-manager"
# Deploy labels per mode. dra-kubelet-plugin is container-only up to chart v0.3.0 and in both modes
# later (the same plugin serves container devices and vfio devices).
CONTAINER_COMPONENTS = (COMP_DRIVER, COMP_DEVICE_PLUGIN, COMP_DRA, COMP_METRICS, COMP_DAEMON, COMP_SMD, COMP_NFD,
                        COMP_VALIDATOR, COMP_TOOLKIT)
VM_COMPONENTS = (COMP_VFIO_MANAGER, COMP_SANDBOX, COMP_DRA)
# Component -> the RBLNClusterPolicy spec key whose `enabled` switches it (None: always deployed).
COMPONENT_POLICY_KEYS: dict[str, str | None] = {
    COMP_DRIVER: "driver", COMP_DEVICE_PLUGIN: "devicePlugin", COMP_DRA: "draKubeletPlugin",
    COMP_METRICS: "metricsExporter", COMP_DAEMON: "rblnDaemon", COMP_SMD: "rblnDaemon",
    COMP_NFD: "npuFeatureDiscovery", COMP_VALIDATOR: None, COMP_TOOLKIT: "containerToolkit",
    COMP_VFIO_MANAGER: "vfioManager", COMP_SANDBOX: "sandboxDevicePlugin",
    COMP_PARTITION_MANAGER: "partitionManager",
}
# Pod label hints (never required): chart v0.3.0 selects `app: <base>-<component>`; later releases
# `app.kubernetes.io/component=<component>` (driver pods: rbln-driver).
COMPONENT_LABEL = "app.kubernetes.io/component"
APP_LABEL = "app"
DRIVER_COMPONENT_LABEL_VALUE = "rbln-driver"

# --- Operator install --------------------------------------------------------------------------

OPERATOR_NAMESPACE = "rbln-system"  # the documented install namespace; the policy's spec.namespace wins
OPERATOR_HELM_CHART = "rbln-npu-operator"
# DaemonSet names are <spec.name>-<component>; spec.name defaults to "rbln" (v0.3.0 api/v1beta1
# rblnclusterpolicy_types.go, BaseName) and later releases always use "rbln".
OPERATOR_BASE_NAME = "rbln"
# DaemonSet names that do not follow <base>-<component> (v0.3.0 internal/scope/patch/rbln_daemon.go).
FIXED_DAEMONSET_NAMES = {"rbln-daemon": COMP_DAEMON}

CLUSTER_POLICY_GROUP = "rebellions.ai"
CLUSTER_POLICY_VERSION = "v1beta1"
CLUSTER_POLICY_PLURAL = "rblnclusterpolicies"
CLUSTER_POLICY_DEFAULT_NAME = "rbln-cluster-policy"
POLICY_STATE_IGNORED = "ignored"
# status.state values (the v0.3.0 CRD's enum: ready, notReady; later releases add ignored), and the condition each
# status.components[] entry carries for its DaemonSet (v0.3.0 internal/scope/patch: DaemonSetReady).
POLICY_STATE_READY = "ready"
POLICY_STATE_NOT_READY = "notReady"
POLICY_COMPONENT_CONDITION = "DaemonSetReady"
POLICY_REASON_IGNORED = "PolicyIgnored"

# --- Resources ---------------------------------------------------------------------------------

RESOURCE_PREFIX = "rebellions.ai/"
# Container mode: later device plugins advertise rebellions.ai/npu (useGenericResourceName, the
# default) and rebellions.ai/npu-vf<N> for SR-IOV VFs; chart v0.3.0 advertises
# <resourcePrefix>/<resourceName> from devicePlugin.resourceList (rebellions.ai/ATOM, rebellions.ai/REBEL).
GENERIC_CONTAINER_RESOURCE = "rebellions.ai/npu"
GENERIC_VF_RESOURCE_PREFIX = "rebellions.ai/npu-vf"
LEGACY_CONTAINER_RESOURCES = ("rebellions.ai/ATOM", "rebellions.ai/REBEL")
# VM mode: later sandbox plugins advertise one resource per product, rebellions.ai/RBLN-<MODEL>_<PF|VF>
# (named from pci.ids); chart v0.3.0 advertises sandboxDevicePlugin.resourceList names, all ending _PT
# (ATOM_PT, ATOM_MAX_PT, REBEL_PT).
SANDBOX_RESOURCE_PREFIX = "rebellions.ai/RBLN-"
LEGACY_VM_RESOURCE_SUFFIX = "_PT"
# Single-alias mode of the later, alias-only sandbox plugin: the operator injects RBLN_PT_ALIAS into the
# plugin; empty -> one resource per product (RBLN-<MODEL>_<PF|VF>), non-empty -> every NPU as
# rebellions.ai/<alias>. Some later-main commits inject "npu_pt" (RBLN-SW/rbln-npu-operator, commit
# 981a5955, internal/clusterpolicy/components/sandbox_device_plugin_test.go: RBLN_PT_ALIAS == "npu_pt");
# newer ones inject "" (same repo, internal/clusterpolicy/components, sandboxResourceAlias = "").
# Chart v0.3.0's plugin (sriovdp + resourceList ConfigMap) never advertises it.
RBLN_PT_ALIAS = "npu_pt"
SANDBOX_ALIAS_RESOURCE = RESOURCE_PREFIX + RBLN_PT_ALIAS

# --- PCI ---------------------------------------------------------------------------------------

PCI_VENDOR_RBLN = 0x1EFF
PCI_CLASS_NPU = 0x120000
HOST_DRIVER = "rebellions"
VFIO_DRIVER = "vfio-pci"
VFIO_MODULES = ("vfio", "vfio_pci", "vfio_iommu_type1")
# iommufd: with CONFIG_IOMMUFD_VFIO_CONTAINER it serves /dev/vfio/vfio itself and vfio_iommu_type1 is not built
# (torvalds/linux drivers/iommu/iommufd/Kconfig, drivers/vfio/Kconfig: VFIO_IOMMU_TYPE1 sits under VFIO_CONTAINER).
IOMMUFD_MODULE = "iommufd"
# Drivers besides vfio-pci (and its variants, every driver named *vfio*) that keep an IOMMU group viable: they set
# driver_managed_dma, so binding them claims no kernel DMA ownership of the group (torvalds/linux
# drivers/pci/pci-stub.c, drivers/pci/pcie/portdrv.c; drivers/pci/pci-driver.c pci_dma_configure()).
GROUP_SAFE_DRIVERS = ("pci-stub", "pcieport")
DEVICE_NODE_GLOBS = ("rbln*", "rsd*")

# Device ID -> (model, function kind), exactly as the pci.ids database names vendor 1eff
# ("RBLN-CA22 (PF)" -> ("CA22", "PF")); the sandbox device plugin derives its resource names
# (rebellions.ai/RBLN-<MODEL>_<PF|VF>) from the same database.
# Source: pciutils/pciids@c1c12547d626:pci.ids (2026.08.22), vendor block "1eff  Rebellions Inc.".
PCI_DEVICE_MODELS: dict[int, tuple[str, str]] = {
    0x1020: ("CA2", "PF"),
    0x1021: ("CA2", "VF"),
    0x1110: ("CA11", "PF"),
    0x1111: ("CA11", "VF"),
    0x1120: ("CA12", "PF"),
    0x1121: ("CA12", "VF"),
    0x1210: ("CA21", "PF"),
    0x1211: ("CA21", "VF"),
    0x1220: ("CA22", "PF"),
    0x1221: ("CA22", "VF"),
    0x1250: ("CA25", "PF"),
    0x1251: ("CA25", "VF"),
    0x2030: ("CR03", "PF"),
    0x2031: ("CR03", "VF"),
    0x2130: ("CR13", "PF"),
    0x2131: ("CR13", "VF"),
    0x2230: ("CR23", "PF"),
    0x2231: ("CR23", "VF"),
}

VALIDATIONS_DIR = "/run/rbln/validations"
VFIO_READY_MARKER = "vfio-pci-ready"
# The marker only the driver pod writes (its startup probe; its preStop removes it): chart v0.2.1-v0.3.0
# internal/scope/patch/driver_manager.go READY_FILE.
DRIVER_READY_MARKER = ".driver-ctr-ready"

# What a component's init container waits for, where the operator's source says (component, init container) ->
# (what it waits for, whether that can ever come on a vm-passthrough node). A pod held in one of these is named
# with this reason by set-mode, node list, status and preflight (rblnctl.operator.convergence.init_hold).
# - sandbox-device-plugin/driver-ready: `until [ -f /run/rbln/validations/.driver-ctr-ready ]` (chart v0.2.1-v0.3.0
#   internal/scope/patch/sandbox-device-plugin.go); the driver DaemonSet selects npu.deploy.driver=true, which the
#   operator sets on container-mode nodes only (v0.3.0 internal/scope/cluster_policy.go rblnComponentLabels): on a
#   vm-passthrough node it never comes. v0.1.0/v0.2.0 have no such init container.
# - sandbox-device-plugin/vfio-bind-checker: `vfio-manage.sh check_bind --all` until every 1eff NPU is bound to
#   vfio-pci, exit 1 after 300 s (v0.1.0-v0.3.0 sandbox-device-plugin.go): the vfio-manager binds them.
# - dra-kubelet-plugin/toolkit-validation: waits for /run/rbln/validations/toolkit-ready, which the operator-validator
#   writes once the container toolkit is set up (v0.3.0 internal/scope/patch/dra_kubelet_plugin.go; later main
#   internal/clusterpolicy/components/dra_kubelet_plugin.go buildToolkitValidationInitContainer): neither runs on a
#   vm-passthrough node (later main cmd/rbln-validator/draready.go says so).
# - dra-kubelet-plugin/dra-ready: toolkit-ready (container nodes) or every NPU bound to vfio-pci (vm-passthrough nodes)
#   (later main cmd/rbln-validator/draready.go @0282159; internal/clusterpolicy/components/dra_kubelet_plugin_test.go).
# - device-plugin, metrics-exporter, npu-feature-discovery, rbln-daemon/toolkit-validation: `until [ -f
#   /run/rbln/validations/toolkit-ready ]` (v0.3.0 internal/scope/patch/{device_plugin,metrics_exporter,
#   npu_feature_discovery,rbln_daemon}.go), written by the operator-validator's own toolkit-validation.
# - operator-validator/driver-validation, container-toolkit/driver-validation: `rbln-validator driver --with-wait`
#   (v0.3.0 internal/scope/patch/validator.go, container_toolkit.go): a driver on the host, else the driver pod's
#   .driver-ctr-ready, then rbln-smi must run; it writes driver-ready (cmd/rbln-validator/driver_validation.go).
# - operator-validator/toolkit-validation: `rbln-validator toolkit` waits for driver-ready and an RBLN CDI spec (the
#   container toolkit writes it), then writes toolkit-ready (v0.3.0 cmd/rbln-validator/toolkit.go).
#   Every one of these is container-only (v0.3.0 internal/scope/cluster_policy.go rblnComponentLabels).
INIT_WAITS: dict[tuple[str, str], tuple[str, bool]] = {
    (COMP_SANDBOX, "driver-ready"): (
        f"it waits for {VALIDATIONS_DIR}/{DRIVER_READY_MARKER}, which only the driver pod writes, and the operator "
        "runs no driver on a vm-passthrough node (operator v0.2.1-v0.3.0)", False),
    (COMP_SANDBOX, "vfio-bind-checker"): ("it waits until the vfio-manager has bound every NPU to vfio-pci (it gives "
                                          "up after 300 s)", True),
    (COMP_DRA, "toolkit-validation"): (
        f"it waits for {VALIDATIONS_DIR}/toolkit-ready, which the operator-validator writes once the container "
        "toolkit is set up, and neither runs on a vm-passthrough node", False),
    (COMP_DRA, "dra-ready"): ("it waits for the container toolkit's toolkit-ready (container mode) or every NPU bound "
                              "to vfio-pci (vm-passthrough)", True),
    **{(comp, "toolkit-validation"): (
        f"it waits for {VALIDATIONS_DIR}/toolkit-ready, which the operator-validator writes once the driver works and "
        "the container toolkit has written the RBLN CDI spec (container mode only)", False)
       for comp in (COMP_DEVICE_PLUGIN, COMP_METRICS, COMP_NFD, COMP_DAEMON)},
    **{(comp, "driver-validation"): (
        f"it waits until the NPU driver works (a driver on the host, else the driver pod's {DRIVER_READY_MARKER}, "
        "then rbln-smi must run; container mode only)", False) for comp in (COMP_VALIDATOR, COMP_TOOLKIT)},
    (COMP_VALIDATOR, "toolkit-validation"): (
        f"it waits for {VALIDATIONS_DIR}/driver-ready and an RBLN CDI spec from the container toolkit, then writes "
        "toolkit-ready (container mode only)", False),
}

# --- KubeVirt ----------------------------------------------------------------------------------

KUBEVIRT_GROUP = "kubevirt.io"
KUBEVIRT_VERSION = "v1"
KUBEVIRT_PLURAL = "kubevirts"
VM_PLURAL = "virtualmachines"
VMI_PLURAL = "virtualmachineinstances"
GATE_HOST_DEVICES = "HostDevices"
GATE_HOST_DEVICES_DRA = "HostDevicesWithDRA"
# A KubeVirt CR the HyperConverged Cluster Operator deployed: HCO labels it with
# app.kubernetes.io/managed-by=hco-operator and app=<HyperConverged name> (kubevirt/hyperconverged-cluster-operator
# @v1.18.1 pkg/util/util.go GetLabels, pkg/util/consts.go OperatorName, AppLabel) and names it
# `kubevirt-<HyperConverged name>` in its own namespace (controllers/handlers/kubevirt.go NewKubeVirtWithNameOnly).
# It rewrites any external edit of the CR's spec back to what the HyperConverged CR says (same file,
# kubevirtHooks.UpdateCR: "Reconciling an externally updated KubeVirt's Spec to its opinionated values").
# What HCO lets a user set: spec.permittedHostDevices.pciHostDevices[] (pciDeviceSelector, resourceName,
# externalResourceProvider) in hco.kubevirt.io/v1beta1 (api/v1beta1/hyperconverged_types.go; the v1 API
# moves it to spec.virtualization.permittedHostDevices). KubeVirt feature gates are not exposed: HCO always
# enables HostDevices (hardCodeKvFgs) and anything else goes through the HyperConverged CR's
# `kubevirt.kubevirt.io/jsonpatch` annotation (docs/cluster-configuration.md, "jsonpatch Annotations").
HCO_MANAGED_BY_VALUE = "hco-operator"
HCO_APP_LABEL = "app"
HCO_KIND = "HyperConverged"
HCO_RESOURCE = "hyperconverged"  # as kubectl names it (hco.kubevirt.io)
HCO_DEFAULT_NAME = "kubevirt-hyperconverged"
HCO_PERMITTED_DEVICES_FIELD = "spec.permittedHostDevices.pciHostDevices"
HCO_JSONPATCH_ANNOTATION = "kubevirt.kubevirt.io/jsonpatch"
# Gates rblnctl refuses to enable (without --force) below this KubeVirt version: DRA host
# devices need KubeVirt >= 1.9.0 (prerequisites table of the source page).
GATE_MIN_KUBEVIRT = {GATE_HOST_DEVICES_DRA: (1, 9, 0)}
# spec.configuration.developerConfiguration.disabledFeatureGates exists from KubeVirt 1.8.0
# (kubevirt/kubevirt@v1.8.0:staging/src/kubevirt.io/api/core/v1/types.go, DeveloperConfiguration);
# from 1.8.0 the update webhook also rejects a gate listed in both lists
# (v1.8.0:pkg/virt-operator/webhooks/kubevirt-update-admitter.go).
DISABLED_GATES_SINCE = (1, 8, 0)
# Beta gates are on unless disabled only from KubeVirt 1.9.0 (before, every non-GA gate had to be
# listed): v1.9.0:pkg/virt-config/featuregate/feature-gates.go, IsEnabled.
BETA_ON_BY_DEFAULT_SINCE = (1, 9, 0)
# A KubeVirt gate name: letters and digits only (every upstream gate matches this).
GATE_NAME_PATTERN = r"[A-Za-z0-9]+"
# Maturity of the gates rblnctl reasons about, per KubeVirt version: (first version, state) steps.
# kubevirt/kubevirt@v1.5.0..v1.9.0:pkg/virt-config/featuregate/active.go (before 1.5 gates had no states).
KUBEVIRT_GATE_STATES: dict[str, tuple[tuple[tuple[int, int, int], str], ...]] = {
    GATE_HOST_DEVICES: (((1, 0, 0), "Alpha"),),
    GATE_HOST_DEVICES_DRA: (((1, 6, 0), "Alpha"), ((1, 9, 0), "Beta")),
}
# Every feature gate KubeVirt registers -> (first release that has it, first release without it or
# None). Derived from kubevirt/kubevirt pkg/virt-config/feature-gates.go (v1.0-v1.4) and
# pkg/virt-config/featuregate/{active,inactive}.go (v1.5-v1.9) at each release tag. Retired gates
# stay registered (GA, Deprecated, Discontinued); only NonRootExperimental was ever removed. Two gates are counted
# from their constant though not registered then: ObjectGraph (v1.6-v1.8) and SecureExecution (v1.6); up to v1.8
# ClusterConfig.isFeatureGateEnabled turns on any listed name (v1.8.0 pkg/virt-config/feature-gates.go), and
# ObjectGraphEnabled/SecureExecutionEnabled read them, so listing them works there.
_GATES_SINCE: dict[tuple[int, int, int], tuple[str, ...]] = {
    (1, 0, 0): (
        "CPUManager", "CPUNodeDiscovery", "ClusterProfiler", "DisableCustomSELinuxPolicy", "DisableMDEVConfiguration",
        "DockerSELinuxMCSWorkaround", "DownwardMetrics", "ExpandDisks", "ExperimentalIgnitionSupport",
        "ExperimentalVirtiofsSupport", "GPU", "HostDevices", "HostDisk", "HotplugNICs", "HotplugVolumes",
        "HypervStrictCheck", "KubevirtSeccompProfile", "LiveMigration", "Macvtap", "MultiArchitecture", "NUMA",
        "NonRoot", "PSA", "Passt", "PersistentReservation", "Root", "SRIOVLiveMigration", "Sidecar", "Snapshot",
        "VMExport", "VMLiveUpdateFeatures", "VMPersistentState", "VSOCK", "WorkloadEncryptionSEV",
    ),
    (1, 0, 1): ("AutoResourceLimitsGate",),
    (1, 1, 0): ("BochsDisplayForEFIGuests", "CommonInstancetypesDeploymentGate", "NetworkBindingPlugins"),
    (1, 1, 1): ("AlignCPUs",),
    (1, 3, 0): ("NodeRestriction", "VolumeMigration", "VolumesUpdateStrategy"),
    (1, 4, 0): ("DynamicPodInterfaceNaming", "InstancetypeReferencePolicy"),
    (1, 5, 0): ("EnableVirtioFsConfigVolumes", "EnableVirtioFsStorageVolumes"),
    (1, 6, 0): (
        "DecentralizedLiveMigration", "DeclarativeHotplugVolumes", "GPUsWithDRA", "HostDevicesWithDRA", "ImageVolume",
        "ObjectGraph", "PanicDevices", "PasstIPStackMigration", "SecureExecution", "VideoConfig",
    ),
    (1, 7, 0): ("IncrementalBackup", "MigrationPriorityQueue", "WorkloadEncryptionTDX"),
    (1, 8, 0): (
        "ConfigurableHypervisor", "ContainerPathVolumes", "ExternalNetResourceInjection",
        "LibvirtHooksServerAndClient", "LiveUpdateNADRef", "OptOutRoleAggregation", "PCINUMAAwareTopology",
        "PasstBinding", "PodSecondaryInterfaceNamingUpgrade", "RebootPolicy", "ReservedOverheadMemlock", "Template",
        "UtilityVolumes", "VmiMemoryOverheadReport",
    ),
    (1, 9, 0): (
        "CrossArchitectureVirtualization", "FirmwareAutoSelection", "GraceIOVirtualization", "IOMMUFD",
        "MigrationStallDetection", "NetworkDevicesWithDRA", "OCIExport", "Plugins", "PortRangesSpec",
        "VGPULiveMigration", "VMStatsCollector",
    ),
}
KUBEVIRT_GATES: dict[str, tuple[tuple[int, int, int], tuple[int, int, int] | None]] = {
    **{g: (since, None) for since, gates in _GATES_SINCE.items() for g in gates},
    "NonRootExperimental": ((1, 0, 0), (1, 2, 0)),
}
# The newest KubeVirt release the table above was read from; newer releases add gates it cannot know.
KUBEVIRT_GATES_CHECKED_UP_TO = (1, 9, 0)

# --- NFD / DRA ---------------------------------------------------------------------------------

NFD_GROUP = "nfd.k8s-sigs.io"
NFD_VERSION = "v1alpha1"
NFD_NODEFEATURE_PLURAL = "nodefeatures"
NFD_NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"

DRA_GROUP = "resource.k8s.io"
DRA_VERSION = "v1"
# The policy's draKubeletPlugin.driverName (default below) names the driver; the passthrough class
# is "vfio-" + that name. ResourceSlice devices are rbln0, rbln1, ... in container mode and
# vfio-<pci address, ':' and '.' as '-'> for devices bound to vfio-pci (type=vfio).
# RBLN-SW/rbln-k8s-dra-driver cmd/npu-kubelet-plugin/vfio.go, deviceclass-vfio-npu.yaml.
DRA_DRIVER = "npu.rebellions.ai"
DRA_DEVICECLASS_CONTAINER = "npu.rebellions.ai"
DRA_DEVICECLASS_VM = "vfio-npu.rebellions.ai"
DRA_VFIO_DEVICE_PREFIX = "vfio-"
# The device taint effects that keep a device from a request that does not tolerate them: NoSchedule and
# NoExecute; any other (None, effects added later) is ignored (kubernetes/kubernetes
# staging/src/k8s.io/dynamic-resource-allocation/structured/internal/stable/allocator_stable.go
# taintPreventsAllocation; resource.k8s.io/v1 ResourceSlice spec.devices[].taints, DRADeviceTaints, beta and on
# in Kubernetes 1.36, GA in 1.37: kube-apiserver v1.36.2 keeps the field and kube-scheduler leaves a tainted device
# alone). Nothing here depends on the gate's stage: the taints are read wherever the API server kept them.
DRA_BLOCKING_TAINT_EFFECTS = ("NoSchedule", "NoExecute")

# --- Version floors (from the prerequisites table of the source page) ---------------------------

METHOD_SANDBOX = "sandbox"
METHOD_DRA = "dra"
METHODS = (METHOD_SANDBOX, METHOD_DRA)

MIN_KUBERNETES = {METHOD_SANDBOX: (1, 19, 0), METHOD_DRA: (1, 34, 0)}
# The most NPUs rblnctl gives one VM: more than any NPU server holds (a sanity bound that turns a typo such
# as --npus 20000 into an error instead of a huge spec; raise it when servers grow).
MAX_VM_NPUS = 64
MIN_KUBEVIRT = {METHOD_DRA: (1, 9, 0)}
# KubeVirt 1.N supports Kubernetes 1.(N+25) to 1.(N+27): the three newest at its release
# (github.com/kubevirt/sig-release releases/k8s-support-matrix.md: 1.6 -> 1.31-1.33, 1.5 -> 1.30-1.32,
# 1.4 -> 1.29-1.31, 1.3 -> 1.28-1.30). Releases after the matrix's last row are assumed to keep the pattern.
KUBEVIRT_K8S_MINOR_OFFSET = (25, 27)
KUBEVIRT_K8S_MATRIX_UP_TO = (1, 6)
MIN_OPERATOR = {METHOD_SANDBOX: (0, 4, 4), METHOD_DRA: (0, 6, 0)}
# The oldest operator release whose layout rblnctl models (docs/operator.md): the public chart v0.3.0.
# Between it and a method's documented minimum preflight warns, unless that method's VM allocator serves
# no VM on the release (VM_ALLOCATOR_FROM below: then it fails).
OPERATOR_SUPPORTED_FROM = (0, 3, 0)
MIN_DRA_DRIVER = (0, 2, 1)
# The public RBLN DRA driver releases: RBLN-SW/rbln-k8s-dra-driver tags v0.1.0 (8213de3), v0.1.1 (d45f721), v0.1.2
# (48c830c), and main up to dd9af1b (2026-06-23): none has a vfio device, DeviceClass or passthrough code (no file
# outside vendor/ mentions vfio). The 0.2.1 floor above is the documentation's; no public release reaches it, so a
# driver at or below this version offers zero passthrough devices (rblnctl.operator.dra.public_driver_gap).
DRA_DRIVER_PUBLIC_UP_TO = (0, 1, 2)
DRA_DRIVER_PUBLIC_SOURCE = "RBLN-SW/rbln-k8s-dra-driver tags v0.1.0-v0.1.2 and main@dd9af1b"
# From which operator release each VM allocator really hands NPUs to VMs on vm-passthrough nodes
# (rblnctl/operator/release.py applies it; docs/operator.md "Releases and VM allocators").
# - sandbox: chart v0.2.1-v0.3.0 (and public main cd771db) give the sandbox-device-plugin DaemonSet an
#   init container `driver-ready` that loops until /run/rbln/validations/.driver-ctr-ready exists
#   (RBLN-SW/rbln-npu-operator@v0.3.0 internal/scope/patch/sandbox-device-plugin.go handleDaemonSet).
#   Only the driver container's startup probe writes that file (v0.3.0 internal/scope/patch/driver_manager.go,
#   READY_FILE; its preStop removes it), and the driver DaemonSet selects npu.deploy.driver=true, a label
#   the operator sets on container-mode nodes only (v0.3.0 internal/scope/cluster_policy.go
#   rblnComponentLabels). So on a vm-passthrough node the plugin stays in Init forever. Later main drops
#   that init container (internal/clusterpolicy/components/sandbox-device-plugin.go: only
#   vfio-bind-checker / vfio-pci-validation). No public tag after v0.3.0 exists to pin the first fixed
#   release; rblnctl takes the documentation's minimum for the sandbox method (docs.rbln.ai
#   "Sandboxed Workloads (KubeVirt)" prerequisites: NPU Operator v0.4.4+), an assumption in docs/operator.md.
# - dra: chart v0.3.0 sets npu.deploy.dra-kubelet-plugin on container-mode nodes only (cluster_policy.go
#   above) and its DRA driver v0.1.0 has no vfio devices; later main deploys it in both modes. The
#   documentation's minimum for DRA passthrough is v0.6.0.
VM_ALLOCATOR_FROM = {COMP_SANDBOX: (0, 4, 4), COMP_DRA: (0, 6, 0)}

MIN_HELM = (3, 9, 0)

# --- Preflight ---------------------------------------------------------------------------------

# How preflight finds the operator Deployment: this selector across namespaces, then by name / Helm
# chart label among the Deployments of OPERATOR_NAMESPACE.
OPERATOR_DEPLOYMENT_SELECTOR = "app.kubernetes.io/name=rbln-npu-operator"
APP_VERSION_LABEL = "app.kubernetes.io/version"
APP_NAME_LABEL = "app.kubernetes.io/name"
HELM_CHART_LABEL = "helm.sh/chart"  # "<chart>-<version>", e.g. rbln-npu-operator-0.6.0
NFD_POD_SELECTOR = "app.kubernetes.io/name=node-feature-discovery"
# NFD raw features (NodeFeature spec.features) and labels preflight reads per node.
NFD_FEATURE_LOADED_MODULES = "kernel.loadedmodule"
NFD_FEATURE_ENABLED_MODULES = "kernel.enabledmodule"  # loaded + built-in (newer NFD)
NFD_FEATURE_PCI = "pci.device"
NFD_FEATURE_CPUID = "cpu.cpuid"
NFD_FEATURE_DMI = "system.dmiid"
NFD_PCI_IOMMU_ATTR = "iommu_group/type"  # set only for devices in an IOMMU group (NFD >= v0.10)
NFD_CPUID_HYPERVISOR = "HYPERVISOR"
NFD_HYPERVISOR_LABEL = "feature.node.kubernetes.io/cpu-cpuid.HYPERVISOR"
HELM_TIMEOUT_S = 10.0

# --- Drain and mode switching (rblnctl node drain / set-mode) -----------------------------------

# Every component the operator deploys, either mode: their pods are the operator's to replace.
# The partition manager is recognised as the operator's (its pods, its DaemonSet) but belongs to no mode's set: which
# mode's deploy labels carry it is not in the indexed source (docs/operator.md, Assumptions), so a switch never waits
# for it to come or go.
OPERATOR_COMPONENTS = tuple(dict.fromkeys(CONTAINER_COMPONENTS + VM_COMPONENTS + (COMP_PARTITION_MANAGER,)))
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
VIRT_LAUNCHER_LABEL = "kubevirt.io"
# Every virt-launcher pod's nodeSelector holds kubevirt.io/schedulable=true, then the KubeVirt CR's
# developerConfiguration.nodeSelectors, then the VMI's own nodeSelector, a later one overriding an earlier one
# (kubevirt/kubevirt@v1.9.0 pkg/virt-controller/services/nodeselectorrenderer.go NewNodeSelectorRenderer,
# template.go newNodeSelectorRenderer; the name is staging/src/kubevirt.io/api/core/v1/types.go NodeSchedulable).
# virt-handler writes it on its node: true on every heartbeat once its device plugins have started, false
# before that and when it shuts down (pkg/virt-handler/heartbeat/heartbeat.go do, labelNodeUnschedulable);
# virt-controller sets it false when virt-handler's heartbeat goes stale (pkg/virt-controller/watch/node/
# node.go markNodeAsUnresponsive). A node without it (no virt-handler there) or with false runs no VM.
KUBEVIRT_SCHEDULABLE_LABEL = "kubevirt.io/schedulable"
# What else virt-controller v1.9.0 puts into a launcher's nodeSelector (nodeselectorrenderer.go NewNodeSelectorRenderer,
# Render; template.go newNodeSelectorRenderer; names in staging/src/kubevirt.io/api/core/v1/types.go):
# - kubernetes.io/arch=<the VMI's spec.architecture, lower-cased>, after kubevirt.io/schedulable and before the CR's
#   and the VMI's selectors (they win on the same key); spec.architecture is set on create from the KubeVirt CR's
#   architectureConfiguration.defaultArchitecture, which defaults to virt-controller's own GOARCH
#   (pkg/virt-config/configuration.go); dropped with the CrossArchitectureVirtualization gate;
# - after the VMI's selectors (they win): kubevirt.io/cpumanager=true for dedicatedCpuPlacement,
#   cpu-model.node.kubevirt.io/<model>=true (not for host-model/host-passthrough), cpu-feature.node.kubevirt.io/<name>
#   =true per feature with policy "" or require, hyperv.node.kubevirt.io/<feature> (HypervStrictCheck gate only: not
#   modelled), machine type, TSC, realtime, SEV/TDX labels (not modelled: docs/vm.md, Assumptions).
ARCH_LABEL = "kubernetes.io/arch"
CPU_MANAGER_LABEL = "kubevirt.io/cpumanager"
CPU_MODEL_LABEL_PREFIX = "cpu-model.node.kubevirt.io/"
CPU_FEATURE_LABEL_PREFIX = "cpu-feature.node.kubevirt.io/"
CPU_MODES_UNLABELLED = ("host-model", "host-passthrough")
VIRT_LAUNCHER_VALUE = "virt-launcher"
VMI_NODE_LABEL = "kubevirt.io/nodeName"  # KubeVirt labels each VMI with the node it runs on
# (moved to the target node after a live migration: kubevirt/kubevirt@v1.8.4 pkg/virt-handler/migration-target.go)
VMI_KIND = "VirtualMachineInstance"  # a virt-launcher pod's controller (template.go NewControllerRef(vmi, ...))
# The emptyDirs KubeVirt itself puts in every virt-launcher pod: runtime state, sockets, binaries, images, not
# user data (kubevirt/kubevirt pkg/virt-controller/services/rendervolumes.go VolumeRenderer.Volumes(),
# withHotplugSupport, withSidecarVolumes, withVirioFS, withHugepages, withBackendStorage, withPluginSocketVolume;
# names in template.go and pkg/virtiofs/virtiofs.go; checked at v1.5.2, v1.6.3, v1.8.4 and main).
# `container-disks` is absent when the ImageVolume gate is on; `kubevirt-plugin-sockets` is main only.
# A VMI's downwardMetrics volume is an emptyDir too, named after the VMI volume (handleDownwardMetrics).
KUBEVIRT_LAUNCHER_EMPTYDIRS = frozenset({
    "private", "public", "sockets", "virt-bin-share-dir", "libvirt-runtime", "ephemeral-disks", "container-disks",
    "hotplug-disks", "hook-sidecar-sockets", "virtiofs-containers", "hugepages", "hugetblfs-dir", "private-libvirt",
    "private-libvirt-qemu", "kubevirt-plugin-sockets",
})
# A VMI's emptyDisk (the guest's scratch disk, KubeVirt's counterpart of an emptyDir) is a qcow2 image under
# /var/run/libvirt/empty-disks/ (pkg/emptydisk/emptydisk.go emptyDiskBaseDir, v1.4.0..main), i.e. inside the
# launcher's `libvirt-runtime` emptyDir (mounted at /var/run/libvirt): that data is the user's.
KUBEVIRT_EMPTYDISK_EMPTYDIR = "libvirt-runtime"
# virt-api's validating webhook on pods/eviction (kubevirt/kubevirt@v1.8.4
# pkg/virt-operator/resource/generate/components/webhooks.go). It answers allowed=false with code 429
# (pod-eviction-admitter.go denied()); kube-apiserver keeps the code and prefixes the message with
# 'admission webhook "NAME" denied the request: ', leaving reason empty (kubernetes/apiserver@v0.35.0
# pkg/admission/plugin/webhook/errors/statuserror.go ToStatusErr).
KUBEVIRT_EVICTION_WEBHOOK = "virt-launcher-eviction-interceptor.kubevirt.io"
# The eviction strategy whose eviction of a VMI that is not live-migratable KubeVirt denies for good (v1.9.0
# pkg/virt-api/webhooks/validating-webhook/admitters/pod-eviction-admitter.go admitLauncherPod).
EVICTION_LIVE_MIGRATE = "LiveMigrate"
# Progress of an interrupted `node set-mode`, kept on the node so a re-run resumes (JSON).
SET_MODE_ANNOTATION = "rebellions.ai/rblnctl.set-mode"

# --- The audit trail: Kubernetes Events rblnctl writes on the objects it changes ----------------------------

# events.k8s.io/v1 Events (the API kube-scheduler and client-go's tools/events write; core v1 readers such as
# `kubectl describe node` and `kubectl events` see the same objects), one when a run starts changing an object
# and one when it ends, as NVIDIA's driver upgrade controller records its drains on the Node
# (NVIDIA/k8s-operator-libs pkg/upgrade/drain_manager.go: Normal/Warning, one reason, "Successfully drained the
# node"). Events of a cluster-scoped object (a Node, the RBLNClusterPolicy) live in `default`: with eventTime set,
# kube-apiserver takes them only there or in kube-system (kubernetes/kubernetes pkg/apis/core/validation/events.go
# legacyValidateEvent).
EVENTS_GROUP = "events.k8s.io"
EVENT_NAMESPACE = "default"
REPORTING_CONTROLLER = "rblnctl"
# The run as data, JSON (docs/node.md "Audit trail"): run, user, action, from, to, result, started, finished.
AUDIT_ANNOTATION = "rebellions.ai/rblnctl.audit"
# What rblnctl did -> (events.k8s.io `action`, the reasons of its start, success, failure and interruption).
AUDIT_SET_MODE = "set-mode"
AUDIT_DRAIN = "drain"
AUDIT_SET_METHOD = "set-method"
AUDIT_EVENTS = {
    AUDIT_SET_MODE: ("SetMode", "ModeSwitchStarted", "ModeSwitched", "ModeSwitchFailed", "ModeSwitchInterrupted"),
    AUDIT_DRAIN: ("Drain", "DrainStarted", "Drained", "DrainFailed", "DrainInterrupted"),
    AUDIT_SET_METHOD: ("SetMethod", "MethodChangeStarted", "MethodChanged", "MethodChangeFailed",
                       "MethodChangeInterrupted"),
}
# How long kube-apiserver keeps an Event (its --event-ttl flag's default, cmd/kube-apiserver/app/options).
DEFAULT_EVENT_TTL = "1h"

# --- Host paths (rblnctl vfio, rblnctl preflight --local) ---------------------------------------

# Host commands read <root>/sys, <root>/proc, <root>/dev and <root>/run; `/` on a live node, or a
# captured or simulated tree.
HOST_ROOT = "/"
# Original drivers of the devices `vfio bind` moved to vfio-pci (under the host root).
VFIO_STATE_FILE = "/var/lib/rblnctl/vfio-state.json"
# The unbinds a run left blocked in the kernel (rblnctl.host.vfio.state.PendingFile), under the host root whatever
# --state-file said: /run, because a pending unbind ends with the boot and so must its record.
VFIO_PENDING_FILE = "/run/rblnctl/vfio-pending.json"
# The shortest --timeout of vfio bind, unbind and recover: a bound shorter than starting the child that writes (a fork)
# ends the wait before the write is made, and the run then reports an unheld device as pending.
VFIO_MIN_WRITE_TIMEOUT_S = 1.0

# --- VMs (rblnctl vm) --------------------------------------------------------------------------

# The VirtualMachine spec rblnctl edits (kubevirt/kubevirt@v1.9.0): spec.template.spec.domain.devices.
# hostDevices[] = {name, deviceName} for a device plugin's resource, or {name, claimName, requestName}
# (ClaimRequest inlined) for DRA (staging/src/kubevirt.io/api/core/v1/schema.go, HostDevice);
# spec.template.spec.resourceClaims[] = {name, resourceClaimTemplateName | resourceClaimName}
# (types.go, VirtualMachineInstanceResourceClaim).
VM_DEVICE_PREFIX = "npu"  # hostDevices rblnctl adds are named npu0, npu1, ...
# rblnctl's one resourceClaims entry in a VM is rbln-npu-<hash of namespace/name>, unique per VM
# (rblnctl.vm.devices.claim_name: the RBLN DRA driver keys its per-node metadata by that name);
# releases before it wrote the fixed name rbln-npu, which vm attach renames.
VM_DRA_CLAIM = "rbln-npu"
# The ResourceClaimTemplate for N NPUs: rbln-npu-<N>, shared by every VM of the namespace that wants N.
# It has N requests npu0..npu<N-1> of one device each: KubeVirt takes exactly one device per request
# ("count > 1 is not supported", kubevirt/kubevirt@v1.9.0 pkg/dra/utils.go resolveDevice), so N NPUs
# are N requests, not one request with count N.
VM_DRA_TEMPLATE_PREFIX = "rbln-npu-"
# Written by the NPU patch that moves a VM off one of rblnctl's templates, which the same run deletes next:
# "<name> uid=<uid>". A run interrupted between the two leaves the template; the next run for the VM (the same
# command again, which has nothing else to do) deletes that template, and only it: by uid, while it is rblnctl's and
# no VM or VMI names it (issue 37). A sweep of every unused template would also take one a second rblnctl run has
# just created for a VM it is about to patch; this names the one the VM itself left. Rewritten by each NPU patch.
VM_TEMPLATE_LEFT_ANNOTATION = "rebellions.ai/rblnctl.template-left"
VM_DRA_REQUEST_PREFIX = "npu"
# Set on a VM while `vm attach|detach --restart` has it stopped, cleared once it is started again: a run that
# could not start it (killed, or the start failed) leaves it, and the next run starts the VM. Its value is
# "<time> uid=<U> generation=<G> observed=<O> run=<R>": what the VM was when rblnctl left it stopped (its uid,
# status.observedGeneration, its runStrategy); a VM that no longer matches was re-created, started (and stopped)
# or re-strategised by someone else since, and its mark is stale (rblnctl.vm.attach.stale_mark): rblnctl does not
# start it. Marks of older rblnctl ("<time> generation=<G>") are stale once the generation moved more than
# VM_STOPPED_MARK_WRITES past G (the stop's runStrategy, the NPU patch).
# Set before the stop is sent, the value ends in VM_STOPPED_MARK_STOPPING until rblnctl sees its stop land; a run
# interrupted in between leaves it so, and such a mark on a stopped VM is never acted on (its stop, or someone
# else's, stopped the VM: rblnctl cannot tell which).
VM_STOPPED_ANNOTATION = "rebellions.ai/rblnctl.stopped"
VM_STOPPED_MARK_WRITES = 2
VM_STOPPED_MARK_STOPPING = "stopping"
# The mark's liveness (issue 37), as a coordination Lease's: while a run holds the VM stopped its mark names it
# (` holder=rblnctl@HOST/PID/RUN lease=S`), renewed at each step; S is the longest the run can go without renewing it
# (its --timeout, one wait) plus this margin. A second run refuses while the mark's holder is live (its time + S not
# past) and takes over an expired one, saying so; a run that leaves the mark (it could not start the VM, or was
# interrupted) drops the holder first, so the re-run it prints never waits for it.
VM_STOPPED_MARK_LEASE_MARGIN_S = 60
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "rblnctl"
# virt-api's aggregated group for start/stop/restart (kubevirt/kubevirt@v1.9.0 pkg/virt-api/api.go).
KUBEVIRT_SUBRESOURCES_GROUP = "subresources.kubevirt.io"
# Labels virt-controller puts on a VMI's virt-launcher pod (v1.9.0 pkg/virt-controller/services/template.go;
# names in staging/src/kubevirt.io/api/core/v1/types.go: AppLabel, CreatedByLabel).
LAUNCHER_CREATED_BY_LABEL = "kubevirt.io/created-by"  # the VMI's uid
VM_NAME_LABEL = "kubevirt.io/vm"  # the template label KubeVirt's examples give a VM's pods
# A VM `vm manifest` writes when no --image is given.
VM_DEFAULT_IMAGE = "quay.io/containerdisks/ubuntu:24.04"
# Its size when no --cpu/--memory (and no --instancetype) is given.
VM_DEFAULT_CORES = 4
VM_DEFAULT_MEMORY = "8Gi"
# instancetype.kubevirt.io: the kinds a VM's spec.instancetype / spec.preference may name. KubeVirt reads the
# kind lower-cased, as the singular or plural resource name, and takes the cluster-wide kind when none is given
# (kubevirt/kubevirt@v1.9.0 pkg/instancetype/find/spec.go Find, preference/find/spec.go; the names in
# staging/src/kubevirt.io/api/instancetype/register.go; InstancetypeMatcher.Kind in .../api/core/v1/types.go).
INSTANCETYPE_KIND = "VirtualMachineInstancetype"
CLUSTER_INSTANCETYPE_KIND = "VirtualMachineClusterInstancetype"
PREFERENCE_KIND = "VirtualMachinePreference"
CLUSTER_PREFERENCE_KIND = "VirtualMachineClusterPreference"
# The VM condition virt-controller sets (status True, no reason) while a running VM's template differs from the
# spec its VMI was started from in a field it cannot update live (hostDevices and resourceClaims always are such),
# and drops when the VMI goes or a new one starts, or the template is put back (kubevirt/kubevirt@v1.9.0
# staging/src/kubevirt.io/api/core/v1/types.go VirtualMachineRestartRequired; pkg/virt-controller/watch/vm/vm.go
# syncRestartRequired, setRestartRequired, cleanupRestartRequired).
VM_RESTART_REQUIRED = "RestartRequired"
# VMI conditions that say nothing about whether a VMI runs: virt-handler sets LiveMigratable and
# StorageLiveMigratable False on every VMI with a PCI host device (every VM with NPUs: reason
# HostDeviceNotLiveMigratable; kubevirt/kubevirt@v1.9.0 pkg/virt-handler/vm.go, measured on the kubevirt stack), and
# Ready is read on its own; `vm start --wait` names none of them as what holds a VM back.
VMI_INFO_CONDITIONS = ("Ready", "LiveMigratable", "StorageLiveMigratable")
# The VM condition virt-controller sets after a failed volume migration; while it is True virt-api refuses every
# start (409 "VM recovery required: Volume migration failed, ..."), but not a stop
# (kubevirt/kubevirt@v1.9.0 = 79d34c1 staging/src/kubevirt.io/api/core/v1/types.go VirtualMachineManualRecoveryRequired;
# pkg/virt-api/rest/lifecycle.go StartVMRequestHandler, subresource.go volumeMigrationManualRecoveryRequiredErr).
VM_MANUAL_RECOVERY = "ManualRecoveryRequired"
# The VM condition VolumesChange (the VMI condition type VirtualMachineInstanceVolumesChange, copied onto the VM while
# a volume update/migration runs): while it is True virt-api answers every restart with the same 409 "VM recovery
# required: ..." (v1.9.0 pkg/virt-api/rest/lifecycle.go RestartVMRequestHandler, checked before the runStrategy;
# types.go VirtualMachineInstanceVolumesChange). A start or a stop it does not refuse.
VM_VOLUMES_CHANGE = "VolumesChange"
# virt-api's message in both refusals (v1.9.0 pkg/virt-api/rest/subresource.go, its
# volumeMigrationManualRecoveryRequiredErr).
VM_RECOVERY_REQUIRED_MESSAGE = "VM recovery required"
VM_READY_TIMEOUT_S = 300.0  # --restart waits this long for the VM to be Ready again
VM_POLL_S = 2.0
# An interrupted `vm attach --restart` (`vm detach`, set-method's conversions) starts again the VM it stopped, and
# gives that clean-up this long: each of its requests times out by then, and its start is not sent again after it.
# An unresponsive virt-api (503 from the aggregation layer) made the clean-up retry for 45-65 s (KubeVirt v1.9.0);
# past the deadline the process ends and says how to start the VM.
CLEANUP_TIMEOUT_S = 5.0

# --- Output (rblnctl's own documents: docs/output.md) -------------------------------------------

# The group/version of every JSON/YAML document rblnctl prints; a breaking change to a kind's shape
# moves it to a new version.
OUTPUT_API_VERSION = "rblnctl.rebellions.ai/v1alpha1"

# --- Host pods (rblnctl preflight --hosts, rblnctl vfio status --node) ----------------------------

# A short-lived pod pinned to a node runs a host command of rblnctl's own image with the node's
# directories mounted read-only under HOST_POD_ROOT. Every pod rblnctl creates carries
# HOST_POD_LABEL (the command) and HOST_POD_RUN_LABEL (one value per run), which is how a run
# lists its pods and how an operator finds leftovers: `kubectl delete pods -A -l rebellions.ai/rblnctl.host-pod`.
HOST_POD_LABEL = "rebellions.ai/rblnctl.host-pod"
HOST_POD_RUN_LABEL = "rebellions.ai/rblnctl.run"
HOST_POD_NODE_ANNOTATION = "rebellions.ai/rblnctl.node"
HOST_POD_ROOT = "/host"
# The image the pods run: the top-level Dockerfile built and pushed by the site. ASSUMPTION: no
# official image is published under this name today (docs/preflight.md says how to build one and
# where to point --image); the tag is the running rblnctl's version, so pod and client agree.
HOST_POD_IMAGE_REPOSITORY = "docker.io/rebellions/rblnctl"
# The non-root user the image declares and the pods run as (the Dockerfile's USER).
HOST_POD_UID = 65532
# The operator chart, which was renamed between releases (rblnctl.operator.install builds every command):
# - up to chart v0.3.0 it is `rbln-npu-operator`, served from the Helm repository below
#   (RBLN-SW/rbln-npu-operator@v0.3.0 deployments/rbln-npu-operator/Chart.yaml, README "Installation").
#   Every chart version in the repository's index is spelt vX.Y.Z: gh-pages@14655f8 index.yaml lists v0.1.0,
#   v0.2.0, v0.2.1, v0.2.2 and v0.3.0, and the published stable/rbln-npu-operator-v0.3.0.tgz carries
#   `version: v0.3.0` in its Chart.yaml, although the tag's .github/workflows/release.yaml would package
#   `--version ${TAG#v}`: a v0.3.0 install is labelled helm.sh/chart=rbln-npu-operator-v0.3.0.
#   The repository moved with the GitHub organisation (rebellions-sw -> RBLN-SW): gh-pages@14655f8 index.md still
#   says `helm repo add rebellions https://rebellions-sw.github.io/rbln-npu-operator`, the later index.md
#   (op@e12f648 index.md) `https://rbln-sw.github.io/rbln-npu-operator`, which rblnctl's remedies name. ASSUMPTION
#   (docs/operator.md): the old address does not serve the index any more (GitHub Pages does not follow an
#   organisation rename); a site that mirrors it can run the printed command with its own --repo;
# - later releases name it `rbln-npu-operator-chart` (Chart.yaml at op@22243b1) and push it to Docker Hub
#   as an OCI artifact: `helm push dist/*.tgz oci://docker.io/rebellions` (.github/workflows/release.yaml,
#   Makefile CHART_NAME / HELM_REGISTRY), version `${TAG#v}` (X.Y.Z). Its values.yaml sets
#   `nameOverride: rbln-npu-operator`, so app.kubernetes.io/name keeps the old value while
#   helm.sh/chart reads `rbln-npu-operator-chart-X.Y.Z` (templates/_helpers.tpl uses .Chart.Name).
OPERATOR_HELM_CHART_LEGACY = OPERATOR_HELM_CHART
OPERATOR_HELM_REPO_URL = "https://rbln-sw.github.io/rbln-npu-operator"
OPERATOR_HELM_CHART_OCI = "rbln-npu-operator-chart"
OPERATOR_HELM_OCI_REGISTRY = "oci://docker.io/rebellions"
OPERATOR_HELM_CHARTS = (OPERATOR_HELM_CHART_OCI, OPERATOR_HELM_CHART_LEGACY)  # longest first
HELM_INSTANCE_LABEL = "app.kubernetes.io/instance"  # a Helm chart's release name on its objects
# Helm 3 stamps these on every object of a release (helm/helm pkg/action/validate.go, setMetadataVisitor).
HELM_RELEASE_NAME_ANNOTATION = "meta.helm.sh/release-name"
HELM_RELEASE_NAMESPACE_ANNOTATION = "meta.helm.sh/release-namespace"

# --- Resource renames (rblnctl kubevirt migrate-resources) --------------------------------------

# The sandbox device plugin's resource names changed when the plugin stopped taking
# sandboxDevicePlugin.resourceList: chart v0.1.0-v0.3.0 advertise `<resourcePrefix>/<resourceName>` per
# resourceList entry, later releases one resource per product and function, RBLN-<MODEL>_<PF|VF>
# (RBLN-SW/rbln-npu-operator later main, sandbox device plugin patcher: "Empty (default) -> per-model
# mode (rebellions.ai/RBLN-<MODEL>_<PF|VF>)"). The chart's default resourceList, which names the product
# each old name stood for when the policy no longer says (RBLN-SW/rbln-npu-operator@v0.3.0
# deployments/rbln-npu-operator/values.yaml, sandboxDevicePlugin.resourceList; REBEL_PT from v0.2.2).
# The chart README's own example maps ATOM_PT to RBLN-CA22 instead, so these are only ever used when a
# vm-passthrough node advertises the resource they lead to.
LEGACY_SANDBOX_DEFAULTS = {
    "rebellions.ai/ATOM_PT": "RBLN-CA12",
    "rebellions.ai/ATOM_MAX_PT": "RBLN-CA25",
    "rebellions.ai/REBEL_PT": "RBLN-CR03",
}
