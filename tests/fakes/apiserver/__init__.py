"""A loopback fake Kubernetes API server: a stateful object store speaking the real REST protocol.

Tests run the real ``kubernetes`` client (and real ``kubectl``) against it and then assert on the
server state (``get``/``list``) and on the recorded requests (``requests``/``writes()``). It is
standard library only: ``http.server.ThreadingHTTPServer`` on 127.0.0.1, port 0.

    fake = FakeApiServer(version="v1.34.1", deletion_delay_s=0.0).start()   # or `with FakeApiServer() as fake:`
    fake.add(objects.node("n1"), objects.pod("default", "p", node="n1"))
    api = kubernetes.client.ApiClient(kubernetes.client.Configuration(host=fake.url))
    ...
    assert fake.get("Node", "n1")["spec"]["unschedulable"] is True
    assert [r.content_type for r in fake.writes()] == ["application/strategic-merge-patch+json"]

What it models (kube-apiserver behaviour, simplified where noted):

* Discovery: ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/{g}``, ``/apis/{g}/{v}`` in the
  legacy (non-aggregated) form; clients asking for aggregated discovery fall back to it, as they
  do against any server that answers plain ``application/json``. ``/openapi/*`` answers 404
  (so ``kubectl apply`` needs ``--validate=false``).
* CRUD on the resources of ``RESOURCES`` (one line each; a created CRD is served too),
  cluster-wide and namespaced paths, ``status`` subresources (main-resource writes keep the
  stored status; status writes change only status; creating a pod resets its status to Pending,
  creating a custom resource drops its status), label selectors (=, ==, !=, in, notin, exists,
  !exists), field selectors limited to the fields the real registry supports (400 otherwise),
  ``limit``/``continue`` paging (``remainingItemCount`` only when no selector was given, as a real
  server; ``resourceVersion=0`` ignores ``limit`` and answers every item, as the real watch cache does),
  optimistic concurrency on ``metadata.resourceVersion`` for PUT and patches,
  ``generateName``, ``dryRun=All`` on every write, finalizers, no-op writes that keep the
  resourceVersion, ``generation`` bumped on spec changes.
* Patches: JSON patch (RFC 6902; a failed ``test`` or a missing path is 422 Invalid with the
  real generic message and the json-patch error in ``details.causes``), merge patch (RFC 7386),
  strategic merge patch with the merge keys of ``SMP_MERGE_KEYS`` (lists not listed there are
  atomic, e.g. node taints and pod tolerations, as in the real API) and the ``$patch``,
  ``$retainKeys``, ``$deleteFromPrimitiveList`` and ``$setElementOrder`` directives; strategic
  merge on a custom resource and unknown patch types are 415.
* Deletion: pods on a node are deleted gracefully when ``deletion_delay_s`` (or the pod
  annotation ``fake.rblnctl.io/deletion-delay-s``) is > 0: ``deletionTimestamp`` and
  ``deletionGracePeriodSeconds`` are set and the pod goes after the delay (``inf``: when a kubelet
  confirms with a DELETE ``gracePeriodSeconds: 0``, as on a real server); unscheduled and
  finished pods, and ``gracePeriodSeconds: 0``, delete at once. Pods and custom resources answer
  with the object, other kinds with a Success Status. DeleteOptions ``preconditions`` (uid,
  resourceVersion) are checked (409 with the message of rest.BeforeDelete).
* ``coordination.k8s.io/v1`` Leases (namespaced, no status): what leader election needs, i.e.
  409 AlreadyExists on a second create, 409 Conflict on an update or patch from a stale
  resourceVersion, and DeleteOptions preconditions.
* ``pods/eviction``: ``eviction_hook``, then (``kubevirt_eviction_webhook``, on by default as in every
  KubeVirt cluster) KubeVirt's pod eviction webhook as kube-apiserver relays its denials (429, no
  reason, message prefixed ``admission webhook "virt-launcher-eviction-interceptor.kubevirt.io" denied
  the request: ``; eviction.py), then
  PodDisruptionBudgets (minAvailable/maxUnavailable,
  int or percent; expected count from the owning controllers' ``spec.replicas``, found by name and uid
  as the disruption controller finds them; one it cannot find is the real server's "still being
  processed" 429 with Retry-After 10), 429 with the real message and ``DisruptionBudget`` cause, else
  201 and a (graceful) delete.
* Pods on nodes, simplified to what a test drives (pods.py): ``kubelet`` (a callable attribute)
  is called with every pod that appears with ``spec.nodeName`` or gets one (created, seeded, or
  bound with ``POST pods/NAME/binding``, which answers 201 Success or 409 ``pod p is already
  assigned to node "n1"``), after commit, outside the lock, before the HTTP reply. It may call
  ``set_pod_phase(ns, name, phase, exit_code=, reason=, message=)``, which writes what a kubelet
  reports: containerStatuses waiting (``ContainerCreating``, ``ErrImagePull``...), running, or
  terminated with an exit code (a Running/Pending pod with ``exit_code`` was restarted once),
  the kubelet-owned conditions (``ContainersNotReady``, ``PodCompleted``, ``PodFailed``), IPs.
  ``GET pods/NAME/log`` answers ``set_pod_log`` text as text/plain (``container`` and
  ``tailLines`` honoured, other options ignored), with the apiserver's 400s for a missing or
  unknown container and the kubelet's for a waiting one (``container "main" in pod "p" is
  waiting to start: ContainerCreating``); a pod on no node has an empty log. A waiting
  container shows no log even when one was set, as on a node. For a pod on a node whose preferred
  address is loopback the log is asked of that node's kubelet, as kube-apiserver asks it
  (``https://ADDR:daemonEndpoints.kubeletEndpoint.Port/containerLogs/NS/POD/CONTAINER``, pods.py;
  tests/cluster/kubelet_endpoint.py is such a kubelet). ``mark_unschedulable(ns, name,
  message)`` is the scheduler's verdict: PodScheduled False/Unschedulable and a Warning
  ``FailedScheduling`` Event from default-scheduler (as events.k8s.io writes it: eventTime,
  reportingComponent). Nothing schedules, pulls or runs by itself.
* KubeVirt's aggregated API ``subresources.kubevirt.io/v1`` (kubevirt.py), in discovery as virt-api
  lists it while ``virtualmachines.kubevirt.io`` is served: ``PUT .../virtualmachines/NAME/start``,
  ``/stop``, ``/restart`` (body optional, ``dryRun`` honoured; authorized as ``update`` on
  ``virtualmachines/start``...) answer 202 with an empty body, or virt-api's 404
  (``virtualmachine.kubevirt.io "x" not found``) and 409s (``VM is not running``, ``VM is already
  running``, ``Always does not support manual start requests``...). stop/start on an Always/Halted
  VM set ``spec.runStrategy`` (``spec.running`` when the VM uses it); Manual/RerunOnFailure VMs and
  restart get ``status.stateChangeRequests``. With ``simulate_kubevirt`` (constructor flag or
  attribute) a virt-controller reacts: a VM changed to Halted loses its VMI and shows Stopped,
  ready false; changed to Always it gets a VMI (Running on the node of the VM annotation
  ``fake.rblnctl.io/node``, else Scheduling and printableStatus Starting) and shows Running, ready
  true, and a virt-launcher pod on that node (labels, owner, one request per sandbox host device, DRA
  claims made from their templates and allocated from the node's free ResourceSlice devices;
  ``kubevirt_launcher_delay_s`` keeps it Pending that long); state change requests are carried out; a
  stopped or deleted VM takes its VMI, pod and claims. Off by default.
  Other virt-api subresources (migrate, console, vnc, pause...) are not modelled (404). Routes are matched as
  virt-api's go-restful matches them, failures in plain text, not a Status: ``404: Page Not Found``, ``405:
  Method Not Allowed``, and ``406: Not Acceptable`` for an ``Accept`` header without ``*/*`` (measured).
* APIServices (aggregator.py): ``GET /apis/apiregistration.k8s.io/v1/apiservices[/NAME]``, a Local one per
  group version served and virt-api's ``v1.subresources.kubevirt.io`` (Service kubevirt/virt-api);
  ``virt_api_available = False`` makes it unavailable and every subresources.kubevirt.io request the
  aggregator's plain-text 503 ``service unavailable``.
* Watch (``?watch=true``): a chunked stream of JSON events, replaying from ``resourceVersion``
  (410 Expired when older than the kept history, see ``compact()``) or starting with synthetic
  ADDED events; selectors apply, an object that stops matching arrives as DELETED. Enough for
  ``kubectl wait`` and ``kubernetes.watch.Watch``. A stream ends cleanly after ``timeoutSeconds``
  or on ``close_watches()`` (what a real server does when its own watch timeout passes; clients
  resume from their last resourceVersion). With ``allowWatchBookmarks=true`` BOOKMARK events
  (only kind, apiVersion and ``metadata.resourceVersion``, after every event they cover) come every
  ``bookmark_interval_s`` (60 s, as the watch cache) and once just before the stream ends; the real
  server sends that last one two seconds before its timeout. ``open_watches`` counts the streams.
* Every error of kube-apiserver's own is a ``Status`` object with the reason and message text a real server uses;
  ``require_token`` gives real 401s.
* Authorization, decided as kube-apiserver does from the request path alone, before routing (a
  refused request is 403 even for a resource that does not exist), with the 403 text of
  responsewriters.Forbidden (``nodes is forbidden: User "fake-user" cannot list resource
  "nodes" in API group "" at the cluster scope``, ``forbidden: User "fake-user" cannot get path
  "/metrics"``). ``forbid(verb, resource, namespace)`` denies; ``enforce_rbac([Role/ClusterRole
  dicts])`` allows only what their rules allow (apiGroups, resources incl. ``pods/eviction`` and
  ``*/status``, verbs, resourceNames, nonResourceURLs with a trailing ``*``; a Role only in its
  namespace), plus what system:discovery, system:public-info-viewer and system:basic-user give
  every authenticated user (discovery, /version, /healthz, /readyz, /livez, access reviews).
  There are no RoleBindings: the fake user holds every role given. ``allow_all()`` ends both.
* ``POST authorization.k8s.io/v1 selfsubjectaccessreviews`` (in discovery, create only) answers
  ``status.allowed`` from the same decision, with the RBAC authorizer's ``reason`` (``RBAC:
  allowed by ClusterRoleBinding "r" of ClusterRole "r" to User "fake-user"``, the binding named
  after the role) and ``denied: true`` for a forbid() rule; ``kubectl auth can-i`` works. Its
  typed client sends protobuf: bodies in ``application/vnd.kubernetes.protobuf`` are decoded for
  the kinds in protobuf.SCHEMAS (recorded as their JSON form; others are 415) and answered in JSON.
* ``POST authorization.k8s.io/v1 selfsubjectrulesreviews`` lists the rules held in
  ``spec.namespace`` (every ClusterRole's, that namespace's Roles', the defaults every user holds), or
  one wildcard rule when RBAC is not enforced, as kube-apiserver answers an admin.
* ``events.k8s.io/v1`` Events (field selectors ``regarding.*``, ``reportingController``, ``reason``, ``type``),
  validated at create as kube-apiserver validates that API's Events (events.py: eventTime,
  reportingController, reportingInstance, action and reason required, ``default`` or ``kube-system`` for a
  cluster-scoped object), kept apart from core v1 Events (the real server keeps one store). ``POST
  authentication.k8s.io/v1 selfsubjectreviews`` answers the ``user`` setting (``kubectl auth whoami``).
* ``inject_fault()`` (method and path regex, ``times``): a Status with any code (``retry_after_s``
  adds the ``Retry-After`` header and ``details.retryAfterSeconds``, as ``errors.NewTooManyRequests``
  answers through responsewriters; client-go waits that long and retries), a delay, a dropped
  connection (``drop``: nothing applied), a raw ``body`` with any ``content_type`` (a proxy's HTML,
  invalid JSON with 200, a JSON list where an object belongs, APF's plain-text 429), or a lost
  reply (``lose_reply``: handled and committed as usual, events and callbacks included, then the
  connection drops, after ``delay_s``; client-go's "unknown outcome"). The RecordedRequest tells
  which: ``applied`` (the real handling ran), ``reply_lost``, ``status``. ``lose_reply`` does not
  apply to watch requests, which stream their own answer.
* The request log: every request is a ``RecordedRequest`` (method, path, query, content type,
  parsed body, headers, status, ``at``: the ``time.monotonic()`` of arrival);
  ``requests_matching(method, path_regex)`` selects some, to count requests or their rate.
* The test harness (tests/cluster: the simulated operator and kubelets, seeding over HTTP) shares the
  server without changing what a test observes of the client under test: its requests (User-Agent
  ``HARNESS_USER_AGENT``) are logged in ``harness_requests`` only, run no ``on_request`` callback and
  take no injected fault unless the fault's ``client`` names it; with ``admin_token`` (``ADMIN_TOKEN``,
  the cluster admin) no ``forbid()`` or ``enforce_rbac()`` refuses them.
* ``on_change`` callbacks run after each committed change, outside the lock, on the thread that
  made it; for an HTTP write that is before the response is sent, so a test can wait for a
  reaction (e.g. ``SimulatedOperator.wait_idle``) right after a client call without races.
* ``on_request`` callbacks run before a client's request is handled, ``on_handled`` ones after it was handled and
  committed, before its reply is sent: another actor can move there, between a client's read and its write or
  right after its write (tests/explore/actors.py).

Not modelled: admission webhooks (but KubeVirt's eviction webhook) and schema validation (bodies are stored
as sent), RoleBindings,
aggregated ClusterRoles and serving RBAC objects, SelfSubjectRulesReview (``kubectl auth can-i
--list``), protobuf responses, garbage collection of dependents (except a simulated VM's VMI),
namespace termination (deleting a namespace deletes its contents at once), Table output for
``kubectl get`` (kubectl falls back to NAME/AGE columns), server-side apply field ownership
(``application/apply-patch+yaml`` must be JSON; it creates a missing object, else applies like a
strategic merge / merge patch), and continue tokens do not pin a snapshot (paging continues after
the last name at current state; a token older than ``compact()`` is 410 Expired, with the token that reads
on as it is now in the Status' metadata, as kube-apiserver v1.36.2 answers).

Where things are (one concern per module; ``server.py`` composes them):

    server.py     FakeApiServer: lifecycle and the public test API, forwarding to the parts below
    config.py     Settings: the knobs a test sets as attributes (deletion_delay_s, require_token...)
    http.py       the HTTP handler: parsing, faults, auth, routing to discovery or a resource
    discovery.py  /version and the discovery documents
    resources.py  Resource, RESOURCES, ResourceTable (lookups, URL -> resource, CRDs)
    store.py      objects, resourceVersions, history, commit/notify, graceful deletion
    rest.py       the REST verbs: list/get/create/update/patch/delete/deletecollection
    patch.py      JSON, merge and strategic merge patch
    selectors.py  label and field selectors
    watch.py      watch streams: replay, selectors, timeouts, close_watches(), bookmarks
    eviction.py   pods/eviction and PodDisruptionBudgets
    pods.py       kubelet hook, pod phases, pods/log, pods/binding, FailedScheduling
    rbac.py       request attributes, forbid(), enforce_rbac(), SelfSubjectAccessReviews
    protobuf.py   decoding protobuf request bodies (SelfSubjectAccessReview)
    kubevirt.py   subresources.kubevirt.io start/stop/restart and the optional VM simulation
    events.py     events.k8s.io/v1 create validation; SelfSubjectReview
    faults.py     inject_fault(): Status answers, raw bodies, drops, lost replies
    recording.py  RecordedRequest and the request log
    errors.py     Status bodies and ApiError
    meta.py, kubeconfig.py   small helpers; write_kubeconfig()
"""

from tests.fakes.apiserver.config import (ADMIN_TOKEN, DELETION_DELAY_ANNOTATION, FAKE_TOKEN, FAKE_USER,
                                          HARNESS_USER_AGENT, VM_NODE_ANNOTATION)
from tests.fakes.apiserver.errors import ApiError, conflict, invalid, not_found, status_body
from tests.fakes.apiserver.patch import (SMP_MERGE_KEYS, SMP_PRIMITIVE_MERGE, PatchError, apply_json_patch,
                                         apply_merge_patch, apply_strategic_merge_patch)
from tests.fakes.apiserver.recording import RecordedRequest
from tests.fakes.apiserver.resources import ALL_VERBS, RESOURCES, Resource
from tests.fakes.apiserver.selectors import label_selector_matches, parse_field_selector, parse_label_selector
from tests.fakes.apiserver.server import FakeApiServer

__all__ = [
    "ADMIN_TOKEN", "ALL_VERBS", "DELETION_DELAY_ANNOTATION", "FAKE_TOKEN", "FAKE_USER", "HARNESS_USER_AGENT",
    "RESOURCES", "SMP_MERGE_KEYS",
    "SMP_PRIMITIVE_MERGE", "VM_NODE_ANNOTATION", "ApiError", "FakeApiServer", "PatchError", "RecordedRequest",
    "Resource", "apply_json_patch", "apply_merge_patch", "apply_strategic_merge_patch", "conflict", "invalid",
    "label_selector_matches", "not_found", "parse_field_selector", "parse_label_selector", "status_body",
]
