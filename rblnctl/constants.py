"""Every label, resource name, PCI ID and version floor rblnctl relies on, in one place.

Sources: ../shared/reference/rbln-operator.md (operator source, DRA driver, docs.rbln.ai) and the
"Sandboxed workloads" page of the RBLN NPU Operator docs. Names a site may change (namespaces,
resource names) are defaults that commands let the user override.
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

# Operator components deployed per mode (value of rebellions.ai/npu.deploy.<component>).
CONTAINER_COMPONENTS = (
    "driver",
    "device-plugin",
    "dra-kubelet-plugin",
    "metrics-exporter",
    "rbln-daemon",
    "npu-feature-discovery",
    "operator-validator",
    "container-toolkit",
)
VM_COMPONENTS = ("vfio-manager", "sandbox-device-plugin", "dra-kubelet-plugin")
COMPONENT_LABEL = "app.kubernetes.io/component"

# --- Operator install --------------------------------------------------------------------------

OPERATOR_NAMESPACE = "rbln-system"
OPERATOR_HELM_CHART = "rbln-npu-operator"
OPERATOR_DAEMONSETS = {
    "vfio-manager": "rbln-vfio-manager",
    "sandbox-device-plugin": "rbln-sandbox-device-plugin",
    "dra-kubelet-plugin": "rbln-dra-kubelet-plugin",
    "device-plugin": "rbln-device-plugin",
    "npu-feature-discovery": "rbln-npu-feature-discovery",
    "metrics-exporter": "rbln-metrics-exporter",
    "container-toolkit": "rbln-container-toolkit",
    "operator-validator": "rbln-operator-validator",
}

CLUSTER_POLICY_GROUP = "rebellions.ai"
CLUSTER_POLICY_VERSION = "v1beta1"
CLUSTER_POLICY_PLURAL = "rblnclusterpolicies"
CLUSTER_POLICY_DEFAULT_NAME = "rbln-cluster-policy"

# --- Resources ---------------------------------------------------------------------------------

RESOURCE_PREFIX = "rebellions.ai/"
CONTAINER_RESOURCE = "rebellions.ai/npu"
# Sandbox device plugin resources look like rebellions.ai/RBLN-CA22_PF; older releases used
# rebellions.ai/ATOM_CA22_PT and friends. Match by prefix, never by one hard-coded name.
VM_RESOURCE_PREFIXES = ("rebellions.ai/RBLN-", "rebellions.ai/ATOM", "rebellions.ai/REBEL")

# --- PCI ---------------------------------------------------------------------------------------

PCI_VENDOR_RBLN = 0x1EFF
PCI_CLASS_NPU = 0x120000
HOST_DRIVER = "rebellions"
VFIO_DRIVER = "vfio-pci"
VFIO_MODULES = ("vfio", "vfio_pci", "vfio_iommu_type1")
DEVICE_NODE_GLOBS = ("rbln*", "rsd*")

# device id -> (model, function kind). PF/VF pairing per the operator's device table.
PCI_DEVICE_MODELS: dict[int, tuple[str, str]] = {
    0x1120: ("CA12", "PF"),
    0x1121: ("CA12", "VF"),
    0x1220: ("CA22", "PF"),
    0x1221: ("CA22", "VF"),
    0x1250: ("CA25", "PF"),
    0x1251: ("CA25", "VF"),
    0x2030: ("CR03", "PF"),
    0x2031: ("CR03", "VF"),
    # rebel100 family; product name unconfirmed upstream.
    0x2130: ("REBEL100", "PF"),
    0x2131: ("REBEL100", "VF"),
}

VALIDATIONS_DIR = "/run/rbln/validations"
VFIO_READY_MARKER = "vfio-pci-ready"

# --- KubeVirt ----------------------------------------------------------------------------------

KUBEVIRT_GROUP = "kubevirt.io"
KUBEVIRT_VERSION = "v1"
KUBEVIRT_PLURAL = "kubevirts"
VM_PLURAL = "virtualmachines"
VMI_PLURAL = "virtualmachineinstances"
GATE_HOST_DEVICES = "HostDevices"
GATE_HOST_DEVICES_DRA = "HostDevicesWithDRA"
# HostDevicesWithDRA is Beta (on unless disabled) from KubeVirt 1.9.0.
GATE_BETA_SINCE = {GATE_HOST_DEVICES_DRA: (1, 9, 0)}
# Gates rblnctl refuses to enable (without --force) below this KubeVirt version: DRA host
# devices need KubeVirt >= 1.9.0 (prerequisites table of the source page).
GATE_MIN_KUBEVIRT = {GATE_HOST_DEVICES_DRA: (1, 9, 0)}
# spec.configuration.developerConfiguration.disabledFeatureGates exists from KubeVirt 1.9.0.
DISABLED_GATES_SINCE = (1, 9, 0)
# A KubeVirt gate name: letters and digits only (every upstream gate matches this).
GATE_NAME_PATTERN = r"[A-Za-z0-9]+"
# Feature gates KubeVirt registers (kubevirt/kubevirt pkg/virt-config/featuregate, v1.0-v1.9),
# Alpha/Beta, GA and deprecated ones alike. Best effort: KubeVirt adds gates every release, so a
# name missing here is accepted with a warning, never refused.
KUBEVIRT_KNOWN_GATES = frozenset({
    "AlignCPUs", "AutoResourceLimitsGate", "BochsDisplayForEFIGuests", "CPUManager", "CPUNodeDiscovery",
    "ClusterProfiler", "CommonInstancetypesDeploymentGate", "DataVolumes", "DecentralizedLiveMigration",
    "DeclarativeHotplugVolumes", "DisableCustomSELinuxPolicy", "DisableMDEVConfiguration", "DockerSELinuxMCSWorkaround",
    "DownwardMetrics", "DynamicPodInterfaceNaming", "EnableVirtioFsConfigVolumes", "EnableVirtioFsStorageVolumes",
    "ExpandDisks", "ExperimentalIgnitionSupport", "ExperimentalVirtiofsSupport", "GPU", "GPUsWithDRA", "HostDevices",
    "HostDevicesWithDRA", "HostDisk", "HotplugNICs", "HotplugVolumes", "HypervStrictCheck", "IOMMUFD", "ImageVolume",
    "IncrementalBackup", "InstancetypeReferencePolicy", "KubevirtSeccompProfile", "LiveMigration", "LiveUpdateNADRef",
    "Macvtap", "MigrationPriorityQueue", "MultiArchitecture", "NUMA", "NetworkBindingPlugins", "NetworkDevicesWithDRA",
    "NodeRestriction", "NonRoot", "ObjectGraph", "PCINUMAAwareTopology", "PSA", "PanicDevices", "Passt",
    "PasstIPStackMigration", "PersistentReservation", "Root", "SRIOV", "SRIOVLiveMigration", "SecureExecution",
    "Sidecar", "Snapshot", "UtilityVolumes", "VMExport", "VMLiveUpdateFeatures", "VMPersistentState", "VSOCK",
    "VideoConfig", "VolumeMigration", "VolumesUpdateStrategy", "WorkloadEncryptionSEV", "WorkloadEncryptionTDX",
})

# --- NFD / DRA ---------------------------------------------------------------------------------

NFD_GROUP = "nfd.k8s-sigs.io"
NFD_VERSION = "v1alpha1"
NFD_NODEFEATURE_PLURAL = "nodefeatures"
NFD_NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"

DRA_GROUP = "resource.k8s.io"
DRA_VERSION = "v1"
DRA_DRIVER = "npu.rebellions.ai"
DRA_DEVICECLASS_CONTAINER = "npu.rebellions.ai"
DRA_DEVICECLASS_VM = "vfio-npu.rebellions.ai"

# --- Version floors (from the prerequisites table of the source page) ---------------------------

METHOD_SANDBOX = "sandbox"
METHOD_DRA = "dra"
METHODS = (METHOD_SANDBOX, METHOD_DRA)

MIN_KUBERNETES = {METHOD_SANDBOX: (1, 19, 0), METHOD_DRA: (1, 34, 0)}
MIN_KUBEVIRT = {METHOD_DRA: (1, 9, 0)}
MIN_OPERATOR = {METHOD_SANDBOX: (0, 4, 4), METHOD_DRA: (0, 6, 0)}
MIN_DRA_DRIVER = (0, 2, 1)
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
OPERATOR_COMPONENTS = tuple(dict.fromkeys(CONTAINER_COMPONENTS + VM_COMPONENTS))
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
VIRT_LAUNCHER_LABEL = "kubevirt.io"
VIRT_LAUNCHER_VALUE = "virt-launcher"
VMI_NODE_LABEL = "kubevirt.io/nodeName"  # KubeVirt labels each VMI with the node it runs on
# Progress of an interrupted `node set-mode`, kept on the node so a re-run resumes (JSON).
SET_MODE_ANNOTATION = "rebellions.ai/rblnctl.set-mode"

# --- Host paths (rblnctl vfio, rblnctl preflight --local) ---------------------------------------

# Host commands read <root>/sys, <root>/proc, <root>/dev and <root>/run; `/` on a live node, or a
# captured or simulated tree.
HOST_ROOT = "/"
# Original drivers of the devices `vfio bind` moved to vfio-pci (under the host root).
VFIO_STATE_FILE = "/var/lib/rblnctl/vfio-state.json"
