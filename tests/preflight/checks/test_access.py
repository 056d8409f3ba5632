"""`rbac.commands`: which commands these credentials can run, from one SelfSubjectRulesReview."""

from __future__ import annotations

from rblnctl import rbac
from rblnctl.preflight.model import Status
from tests.preflight.cluster_support import cluster, run, seed


def test_an_admin_can_run_every_command(apiserver, kube):
    seed(apiserver, nodes=1)
    c = cluster(run(kube))["rbac.commands"]
    assert c.status == Status.PASS and c.evidence == f"all {len(rbac.COMMANDS)} commands"
    reviews = apiserver.requests_matching("POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews")
    assert len(reviews) == 1 and reviews[0].body["spec"] == {"namespace": "rbln-system"}


def test_the_read_role_names_the_commands_it_cannot_run_and_the_role_to_grant(apiserver, kube):
    seed(apiserver, nodes=1)
    apiserver.enforce_rbac(rbac.rbac_objects(rbac.ROLE_READ, "rbln-system"))
    c = cluster(run(kube))["rbac.commands"]
    assert c.status == Status.WARN
    for command in set(rbac.COMMANDS) - rbac.READ_COMMANDS:
        assert f"{command} (needs " in c.evidence
    assert "node set-mode (needs patch nodes" in c.evidence or "node set-mode (needs " in c.evidence
    assert c.remedy_command == "rblnctl rbac -n rbln-system --role operate"


def test_the_operate_role_runs_everything(apiserver, kube):
    seed(apiserver, nodes=1)
    apiserver.enforce_rbac(rbac.rbac_objects(rbac.ROLE_OPERATE, "rbln-system"))
    assert cluster(run(kube))["rbac.commands"].status == Status.PASS


def test_a_refused_review_is_a_warning_not_a_failure(apiserver, kube):
    seed(apiserver, nodes=1)
    apiserver.forbid("create", "selfsubjectrulesreviews")
    c = cluster(run(kube))["rbac.commands"]
    assert c.status == Status.WARN and "cannot create selfsubjectrulesreviews" in c.evidence
