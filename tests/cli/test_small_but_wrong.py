"""Small but wrong (issue 30): messages that say what is true, once."""

from __future__ import annotations

from rblnctl.audit import one_line
from tests.cli.test_node import cluster  # noqa: F401  (the fixture)
from tests.cli.test_node_pool import pool  # noqa: F401  (the fixture)
from tests.helpers import cli


def test_already_in_the_mode_is_said_once(cluster):  # noqa: F811
    r = cli("node", "set-mode", "n1", "container", server=cluster.url)
    assert r.exit_code == 0, r.stderr
    assert r.stderr.count("nothing to do") == 1, r.stderr


def test_ctrl_c_is_interrupted_in_the_events_not_the_python_class():
    assert one_line(KeyboardInterrupt()) == "interrupted"
    assert one_line(RuntimeError()) == "RuntimeError" and one_line(ValueError("a\n b")) == "a b"


def test_ctrl_c_before_the_cordon_says_the_node_is_not_cordoned(cluster, mocker):  # noqa: F811
    mocker.patch("rblnctl.node.mode.ModeSwitcher.apply", side_effect=KeyboardInterrupt)
    r = cli("node", "set-mode", "n1", "vm", "--yes", server=cluster.url)
    assert r.exit_code == 130
    assert "node n1 is not cordoned, with its progress record, mid-switch" in r.stderr
    assert "may be" not in r.stderr


def test_ctrl_c_after_the_cordon_says_the_node_is_cordoned(cluster, mocker):  # noqa: F811
    def cordon_then_ctrl_c(self, plan):
        cluster.mutate("Node", "n1", None, lambda n: n["spec"].update(unschedulable=True))
        raise KeyboardInterrupt

    mocker.patch("rblnctl.node.drain.Drainer.apply", cordon_then_ctrl_c)
    r = cli("node", "drain", "n1", "--yes", server=cluster.url)
    assert r.exit_code == 130 and "node n1 is cordoned and may be partly drained" in r.stderr


def test_ctrl_c_on_a_terminal_puts_interrupted_on_its_own_line():
    from rblnctl.cli.errors import interrupted_line

    assert interrupted_line(None, True) == "\ninterrupted"  # after the terminal's ^C echo
    assert interrupted_line(None, False) == "interrupted" and interrupted_line(15, True) == "terminated by signal 15"


def _held(pool) -> None:  # noqa: F811
    from tests.cli.test_node_pool import NPU
    from tests.fakes import objects as o

    pool.add(o.pdb("default", "hold", selector={"app": "held"}, min_available=1),
             o.pod("default", "held", node="n1", owner_kind="ReplicaSet", owner_name="web", requests=NPU,
                   labels={"app": "held"}))


def test_a_budget_timeout_names_the_budget_its_numbers_and_what_next(pool):  # noqa: F811
    _held(pool)
    r = cli("node", "drain", "n1", "--timeout", "1s", "--yes", server=pool.url)
    assert r.exit_code == 5, r.stderr
    assert "PodDisruptionBudget default/hold needs 1 healthy pod(s) and has 1: it allows no eviction of " \
           "default/held" in r.stderr
    assert "next: see the budget (`kubectl get pdb hold -n default`)" in r.stderr and "--disable-eviction" in r.stderr


def test_a_pool_of_one_node_that_times_out_exits_5_not_6(pool):  # noqa: F811
    _held(pool)
    r = cli("node", "drain", "-l", "kubernetes.io/hostname=n1", "--timeout", "1s", "--yes", server=pool.url)
    assert r.exit_code == 5, r.stderr
    assert "error: node n1: pods did not leave within 1s" in r.stderr
    assert "PodDisruptionBudget default/hold" in r.stderr


def test_rbac_forbidding_offers_the_rules_of_the_role_the_command_needs(apiserver):
    from tests.fakes import objects as o

    apiserver.add(o.cluster_policy(), o.npu_node("n1"))
    apiserver.forbid("list", "nodes")
    r = cli("node", "list", server=apiserver.url)
    assert r.exit_code == 4
    assert "`rblnctl rbac --role read | kubectl apply -f -`" in r.stderr and "rblnctl-read" in r.stderr
    apiserver.allow_all()
    apiserver.forbid("patch", "nodes")
    r = cli("node", "set-mode", "vm", "n1", "--yes", server=apiserver.url)
    assert r.exit_code == 4, r.stderr
    assert "`rblnctl rbac --role operate | kubectl apply -f -`" in r.stderr
