"""Mutation checks: one-line bugs put into rblnctl on purpose, each with the tests that must catch it.

    python -m tests.mutations.check --list           # the catalogue
    python -m tests.mutations.check                   # every mutation: baseline green, then each must fail
    python -m tests.mutations.check 23.1 20.4         # some of them
    python -m tests.mutations.check --scope tests/vm 23.1   # run a wider set of tests instead (a survey)
    python -m tests.mutations.check --markdown        # the rows of docs/testing.md's table

For each mutation the file is rewritten with the one-line change, the mutation's tests run (in a fresh
``pytest`` process that writes no bytecode; every test that fails is named; with --scope it stops at the
first), and the original bytes and mtime are put back, whatever happens (an error, Ctrl-C). A mutation
is CAUGHT when every test it names fails (PARTLY when some pass), SURVIVED when they all pass. The
tests are first run once unmutated (the baseline): a test that fails anyway proves nothing.

The catalogue is the record of docs/testing.md "Mutation checks"; tests/mutations/test_catalogue.py keeps
it true to the code (every `old` line is still there, exactly once, and every test it names exists), so a
refactor that moves a guarded branch shows up as a failing test rather than a stale list. Nothing here
is ever committed mutated: the script restores the file before it reports.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Mutation:
    id: str
    file: str  # relative to the repository root
    old: str  # occurs exactly once in the file
    new: str
    what: str  # the branch it removes or negates, in words
    tests: tuple[str, ...]  # pytest node ids that must fail with it
    notes: str = ""
    expect: str = "caught"  # "caught", or "survives" with `notes` giving the evidence


_CONVERT_IDENTITY = "tests/method/test_convert_identity.py::"  # issue 37's set-method cases

MUTATIONS: tuple[Mutation, ...] = (
    # -- issue 23: the VM half's in-between states ------------------------------------------------------------
    Mutation(
        id="23.1", file="rblnctl/vm/attach/facts.py",
        old="if name != exclude and is_running(vmi) and template in D.templates_used(D.vmi_spec(vmi)):",
        new="if name != exclude and is_running(vmi) and template in D.templates_used(D.vm_spec(vmi)):",
        what="template deletion: read a VMI's claims at the VM's spec path (spec.template.spec)",
        tests=("tests/vm/test_templates.py::test_a_running_vmi_naming_the_template_keeps_it",),
        notes="survived the suite before issue 23"),
    Mutation(
        id="23.2", file="rblnctl/vm/attach/template_writes.py",
        old="users = [] if self.options.server_dry_run else self.reader.template_users(ns, name, exclude=ref.name,",
        new="users = [] if True else self.reader.template_users(ns, name, exclude=ref.name,",
        what="template deletion: no re-read of the template's users just before deleting it",
        tests=("tests/vm/test_templates.py::test_a_vm_naming_the_template_after_plan_keeps_it",),
        notes="survived the suite before issue 23"),
    Mutation(
        id="23.2b", file="rblnctl/vm/devices.py",
        old="    return ((obj.get(\"metadata\") or {}).get(\"labels\") or {}).get(C.MANAGED_BY_LABEL) == C.MANAGED_BY",
        new="    return True",
        what="template deletion: a template replaced after plan() by one rblnctl did not write is deleted",
        tests=("tests/vm/test_templates.py::test_a_template_replaced_by_a_hand_made_one_after_plan_is_not_deleted",),
        notes="survived the suite before issue 23; the delete judges ownership twice since issue 37 (before the "
              "delete and on each re-read), so the one rule both ask is what is broken here"),
    Mutation(
        id="23.2c", file="rblnctl/vm/attach/template_writes.py",
        old="users = [] if self.options.server_dry_run else self.reader.template_users(ns, name, exclude=ref.name,",
        new="users = [] if False else self.reader.template_users(ns, name, exclude=ref.name,",
        what="template deletion: a server dry run reads the template's users again before the (dry) delete",
        tests=("tests/vm/test_templates.py::test_a_server_dry_run_sends_the_delete_with_dry_run_and_keeps_the_template",),
        notes="no longer equivalent since the VM itself counts as a user (issue 37: a second run may put it back on "
              "the template): under dryRun=All its patch did not persist, so the re-read finds it and the dry run "
              "would report the template kept, not what the real run does"),
    Mutation(
        id="23.3", file="rblnctl/vm/attach/layout.py",
        old='    return vmi is not None and (vmi.get("status") or {}).get("phase") not in FINAL_PHASES',
        new='    return vmi is not None and (vmi.get("status") or {}).get("phase") == "Running"',
        what="running-VM refusal: only a Running VMI counts as running (not Scheduling, Pending, ...)",
        tests=("tests/vm/test_attach.py::test_a_vmi_on_its_way_up_is_running_too",),
        notes="survived the suite before issue 23"),
    Mutation(
        id="23.3b", file="rblnctl/vm/attach/plan.py",
        old="    if changed and running and not options.restart:",
        new='    if changed and running and phase_of(vmi) == "Running" and not options.restart:',
        what="running-VM refusal (at the refusal itself): a VMI not yet Running is not refused",
        tests=("tests/vm/test_attach.py::test_a_vmi_on_its_way_up_is_running_too",),
        notes="survived the suite before issue 23"),
    Mutation(
        id="23.4", file="rblnctl/method/plan.py",
        old="    if edit.patch or conversions:",
        new="    if edit.patch:",
        what="method change: no VMI-holds-NPUs refusal when the policy is already on the target (convert only)",
        tests=("tests/method/test_changer.py::test_convert_only_is_refused_while_a_vmi_holds_npus",),
        notes="survived the suite before issue 23"),
    Mutation(
        id="23.5", file="rblnctl/operator/convergence.py",
        old='            out.append(Pending(kind=Missing.RESOURCE, text=f"allocatable still offers the sandbox '
            'plugin\'s {k}"))',
        new="            pass",
        what="method change wait (to DRA): the sandbox resource a lagging kubelet still advertises is ignored",
        tests=("tests/method/test_changer.py::test_the_wait_for_dra_outlasts_a_kubelet_still_advertising_sandbox",),
        notes="survived the suite before issue 23"),
    Mutation(
        id="23.6", file="rblnctl/vm/resource_rename.py",
        old="        if r.source != Source.GIVEN and dev is not None:",
        new="        if dev is not None:",
        what="migrate-resources: the CR entry's PCI selector overrides the --map the user gave",
        tests=("tests/kubevirt/test_resource_rename.py::test_a_given_mapping_wins_over_the_cr_entrys_selector",),
        notes="survived the suite before issue 23"),
    Mutation(
        id="23.7", file="rblnctl/operator/convergence.py",
        old="    if plugin in allocators and deploy.is_set(plugin):",
        new="    if plugin in allocators:",
        what="convergence: a DRA-only container node (devicePlugin enabled, not deployed) waits for an extended "
             "resource",
        tests=("tests/operator/test_convergence.py::test_a_dra_only_container_node_needs_no_extended_resource",),
        notes="survived the suite before issue 23"),
    Mutation(
        id="23.8", file="rblnctl/hostpods/runner.py",
        old="                for name in created:",
        new="                for name in in_flight:",
        what="host pods: only the pods known to run are deleted, not every pod a create was sent for",
        tests=("tests/hostpods/test_runner.py::test_a_create_whose_outcome_is_unknown_is_still_cleaned_up",
               "tests/hostpods/test_runner.py::test_a_create_interrupted_before_its_reply_is_still_cleaned_up"),
        notes="before issue 23 only tests/cli/test_preflight.py::test_hosts_interrupted_deletes_every_pod caught it"),

    # -- issue 20's VM code: per-VM claim names, restart after a failure, batch outcomes --------------------------
    Mutation(
        id="20.1", file="rblnctl/vm/devices.py",
        old='    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:_CLAIM_HASH]',
        new='    digest = hashlib.sha256(f"{name}".encode()).hexdigest()[:_CLAIM_HASH]',
        what="claim names: the namespace is left out of the hash (same-named VMs of two namespaces collide)",
        tests=("tests/vm/test_claim_names.py::test_two_dra_vms_attached_by_rblnctl_start_on_one_node",
               "tests/vm/test_attach.py::test_dra_creates_the_template_and_points_devices_at_its_requests")),
    Mutation(
        id="20.2", file="rblnctl/vm/devices.py",
        old='_MANAGED_CLAIM = re.compile(re.escape(C.VM_DRA_CLAIM) + r"(-[0-9a-f]{%d})?" % _CLAIM_HASH)',
        new='_MANAGED_CLAIM = re.compile(re.escape(C.VM_DRA_CLAIM) + r"(-[0-9a-f]{%d})" % _CLAIM_HASH)',
        what="claim names: the old fixed rbln-npu is no longer recognised as rblnctl's (never renamed)",
        tests=("tests/vm/test_claim_names.py::test_attach_renames_the_old_fixed_name_and_is_stable",)),
    Mutation(
        id="20.3", file="rblnctl/vm/attach/layout.py",
        old="        if D.is_managed_claim(c) and name not in referenced - {claim}:",
        new="        if D.is_managed_claim(c) and name == claim:",
        what="claim names: attach keeps an rblnctl entry under another name (old rbln-npu, a copied VM's) as is",
        tests=("tests/vm/test_claim_names.py::test_an_old_claim_entry_no_device_uses_any_more_is_not_left_behind",),
        notes="survived issue 20's suite: the elif below it drops an old entry a device used; one no device "
              "used was kept"),
    Mutation(
        id="20.4", file="rblnctl/vm/resource_rename.py",
        old="    if len(renamed) != 1:",
        new="    if not renamed:",
        what="migrate-resources: a VM with several rblnctl claim entries (hand-edited) is renamed anyway",
        tests=("tests/kubevirt/test_resource_rename.py::test_a_vm_with_several_rblnctl_claim_entries_is_left_to_vm_attach",),
        notes="survived issue 20's suite (two entries made the rename crash with ValueError)"),
    Mutation(
        id="20.5", file="rblnctl/vm/resource_rename.py",
        old="        if moved:",
        new="        if False:",
        what="migrate-resources: a renamed claim's host devices keep the old claimName",
        tests=("tests/kubevirt/test_resource_rename.py::test_a_dra_vm_with_the_old_fixed_claim_name_gets_its_own",)),
    Mutation(
        id="20.6", file="rblnctl/vm/diagnose/links.py",
        old="    here = [n for n in f.neighbours if n.node and n.node == node]",
        new="    here = []",
        what="vm diagnose: another VM on the node with the same claim name is not the broken link",
        tests=("tests/vm/test_diagnose.py::test_two_vms_with_one_claim_name_on_a_node_is_the_broken_link",)),
    Mutation(
        id="20.7", file="rblnctl/vm/diagnose/facts.py",
        old='        if oref == ref or (other.get("status") or {}).get("phase") in FINAL_PHASES:',
        new="        if oref == ref:",
        what="vm diagnose: a finished VMI counts as a neighbour sharing the claim name",
        tests=("tests/vm/test_claim_names.py::test_a_finished_vmi_sharing_the_claim_name_is_no_collision",),
        notes="survived issue 20's suite"),
    Mutation(
        id="20.8", file="rblnctl/vm/attach/apply.py",
        old="        run = RestartProgress(ours=plan.start, confirmed=plan.start)",
        new="        run = RestartProgress(ours=False, confirmed=plan.start)",
        what="restart: a re-run does not start the VM an earlier run stopped and left stopped",
        tests=("tests/vm/test_restart.py::test_a_vm_that_cannot_be_started_again_says_how_and_the_next_run_starts_it",)),
    Mutation(
        id="20.9", file="rblnctl/vm/attach/apply.py",
        old="            if not dry:\n                self._recover(restarter, plan, err, run)\n",
        new="            if False:\n                self._recover(restarter, plan, err, run)\n",
        what="restart: a failure after the stop leaves the VM stopped",
        tests=("tests/vm/test_restart.py::test_a_failure_after_the_stop_starts_the_vm_again",)),
    Mutation(
        id="20.10", file="rblnctl/vm/attach/apply.py",
        old="                self._mark(plan, MARK_STOPPED)  # (virt-controller moves observedGeneration "
            "while a VMI is",
        new="                pass",
        what="restart: the VM is stopped without the (certain) mark that lets a later run start it",
        tests=("tests/vm/test_restart.py::test_a_vm_that_cannot_be_started_again_says_how_and_the_next_run_starts_it",)),
    Mutation(
        id="20.11", file="rblnctl/vm/attach/plan.py",
        old="    marked = annotated and not running",
        new="    marked = annotated",
        what="restart: a VM marked stopped-by-rblnctl that runs again (started by hand) is started again",
        tests=("tests/vm/test_stopped_mark.py::test_a_running_vm_with_the_mark_is_not_started_again",
               "tests/vm/test_stopped_mark.py::test_a_change_to_a_running_vm_with_the_mark_is_refused_as_running"),
        notes="survived issue 20's suite"),
    Mutation(
        id="20.12", file="rblnctl/vm/attach/apply.py",
        old="            self._mark(plan, None)  # started by rblnctl, or by someone else: the mark is no longer true\n"
            "            run.ours = False",
        new="            pass\n            run.ours = False",
        what="restart: the mark stays after the VM was started again",
        tests=("tests/vm/test_attach.py::test_restart_stops_patches_starts_and_waits_until_ready",)),
    Mutation(
        id="20.13", file="rblnctl/batch.py",
        old="    if isinstance(err, ClusterUnreachable) and not isinstance(err, OutcomeUnknown):",
        new="    if isinstance(err, ClusterUnreachable):",
        what="batch: a write whose outcome is unknown on one object stops the others (the server did answer)",
        tests=("tests/hostpods/test_runner.py::test_a_create_whose_outcome_is_unknown_is_still_cleaned_up",),
        notes="survived issue 20's suite; caught since by issue 23's failing_create test"),
    Mutation(
        id="20.14", file="rblnctl/batch.py",
        old="        return self.state in (State.DONE, State.UNCHANGED)",
        new="        return self.state == State.DONE",
        what="batch: an unchanged object (already so, deleted meanwhile) makes the run partial",
        tests=("tests/method/test_changer.py::test_a_vm_deleted_before_its_conversion_is_unchanged_and_the_run_complete",),
        notes="survived issue 20's suite"),
    Mutation(
        id="20.15", file="rblnctl/method/changer.py",
        old="                stopped = switched[0] if switched else batch.stops_the_rest(e)",
        new="                stopped = switched[0] if switched else None",
        what="set-method --convert-vms: an unreachable API server does not stop the conversions",
        tests=("tests/method/test_changer.py::test_an_unreachable_api_server_mid_convert_vms_leaves_the_rest_not_attempted",)),
    Mutation(
        id="20.16", file="rblnctl/method/changer.py",
        old="            if plan.conversions and waited:",
        new="            if False:",
        what="set-method --convert-vms: a failed patch or wait does not name the VMs left unconverted",
        tests=("tests/method/test_changer.py::test_a_method_change_that_does_not_finish_names_the_vms_not_converted",),
        notes="survived issue 20's suite"),
    Mutation(
        id="20.17", file="rblnctl/method/changer.py",
        old="        if not batch.complete(outcomes):",
        new="        if False:",
        what="set-method --convert-vms: a VM that failed does not make the run partial (exit 0)",
        tests=("tests/method/test_changer.py::test_a_vm_that_cannot_be_converted_is_named_and_the_others_are",)),
    Mutation(
        id="20.18", file="rblnctl/method/changer.py",
        old='                outcomes.append(ItemOutcome(kind="VirtualMachine", name=name, state=State.UNCHANGED,\n'
            '                                            reason="deleted meanwhile"))',
        new='                outcomes.append(ItemOutcome(kind="VirtualMachine", name=name, state=State.FAILED,\n'
            '                                            reason="deleted meanwhile"))',
        what="set-method --convert-vms: a VM deleted between plan and conversion is a failure",
        tests=("tests/method/test_changer.py::test_a_vm_deleted_before_its_conversion_is_unchanged_and_the_run_complete",),
        notes="survived issue 20's suite"),
    Mutation(
        id="20.19", file="rblnctl/vm/resource_rename.py",
        old="                stopped = batch.stops_the_rest(e) or (",
        new="                stopped = batch.stops_the_rest(e) and (",
        what="migrate-resources: VMs are renamed although the KubeVirt CR could not be",
        tests=("tests/kubevirt/test_resource_rename.py::test_a_kubevirt_cr_that_cannot_be_renamed_leaves_every_vm_not_attempted",)),
    Mutation(
        id="20.20", file="rblnctl/vm/resource_rename.py",
        old="                stopped = batch.stops_the_rest(e)\n                continue",
        new="                stopped = None\n                continue",
        what="migrate-resources: an unreachable API server does not stop the VM renames",
        tests=("tests/kubevirt/test_resource_rename.py::test_an_api_server_lost_mid_run_leaves_the_vms_after_it_not_attempted",),
        notes="survived issue 20's suite"),
    Mutation(
        id="20.21", file="rblnctl/hostpods/runner.py",
        old="    if isinstance(err, (Forbidden, NotFound)):",
        new="    if isinstance(err, Forbidden):",
        what="host pods: a namespace gone mid-run does not stop the creates of the other nodes",
        tests=("tests/hostpods/test_runner.py::test_a_namespace_deleted_mid_run_leaves_the_nodes_not_started_not_attempted",
               "tests/hostpods/test_runner.py::test_missing_namespace_is_not_found_naming_the_flag"),
        notes="caught before only through a namespace missing at the first create; mid-run it survived"),
    Mutation(
        id="42.h1", file="rblnctl/hostpods/runner.py",
        old="                listed = ev is not None and ev.type == SYNC",
        new="                listed = ev is not None",
        what="host pods: a pod the watch has not shown yet is judged gone (vanished) at the next event",
        tests=("tests/hostpods/test_runner.py::test_requests_grow_with_nodes_not_with_waiting",
               "tests/hostpods/test_runner.py::test_max_parallel_is_never_exceeded[3]",
               "tests/hostpods/test_runner.py::test_keep_leaves_the_pods_and_sends_no_delete")),
    Mutation(
        id="42.h2", file="rblnctl/hostpods/runner.py",
        old="            version = ev.resource_version or version",
        new="            version = None",
        what="host pods: the watch reopened after a pod's deadline lists again instead of resuming where it stopped",
        tests=("tests/hostpods/test_runner.py::test_a_pod_that_never_ends_times_out_and_is_deleted",)),
    # -- the stale stopped mark issue 23's survey found; issue 22's capacity, fit and lifecycle code ------------
    Mutation(
        id="23.9", file="rblnctl/vm/attach/mark.py",
        old="    if now <= then + C.VM_STOPPED_MARK_WRITES:\n        return None",
        new="    if True:\n        return None",
        what="stopped mark: a VM its owner started and stopped after rblnctl left it stopped is started again",
        tests=("tests/vm/test_stopped_mark.py::test_a_stale_mark_on_a_vm_with_nothing_to_change_is_left_and_named",),
        notes="the bug issue 23's survey found: before, the mark held no generation. This rule is an older rblnctl's "
              "mark's now (no uid); a mark with its uid is judged by observedGeneration (23.9b)"),
    Mutation(
        id="23.9b", file="rblnctl/vm/attach/mark.py",
        old="        if observed not in evidence.get(\"observed\", observed).split(\",\"):",
        new="        if False:",
        what="stopped mark: a VM its owner started and stopped after rblnctl left it stopped (a new VMI's generation) "
             "is started again",
        tests=("tests/vm/test_stopped_mark.py::test_a_vm_started_and_stopped_by_hand_since_is_not_started_by_the_next_run",)),
    Mutation(
        id="23.10", file="rblnctl/vm/attach/apply.py",
        old="            elif run.ours:  # the earlier run's mark, taken (this run holds it now) and renewed for its "
            "writes",
        new="            elif False:  # the earlier run's mark, taken (this run holds it now) and renewed for its "
            "writes",
        what="stopped mark: a resumed run's own writes are not recorded, so its failures make the mark look stale",
        tests=("tests/vm/test_stopped_mark.py::"
               "test_runs_that_keep_failing_to_start_it_renew_the_mark_so_a_later_run_still_starts_it",)),
    Mutation(
        id="23.11", file="rblnctl/vm/attach/apply.py",
        old="                if plan.stale_mark and not run.ours:",
        new="                if False:",
        what="stopped mark: a stale mark outlives the change that named it",
        tests=("tests/vm/test_stopped_mark.py::test_a_vm_started_and_stopped_by_hand_since_is_not_started_by_the_next_run",)),
    Mutation(
        id="28.1", file="rblnctl/vm/attach/apply.py",
        old="        run.marked = True\n        self._mark(plan, MARK_STOPPING)",
        new="        run.marked = False\n        self._mark(plan, MARK_STOPPING)",
        what="stopped mark: a signal as the mark lands leaves it on a VM rblnctl never stopped",
        tests=("tests/vm/test_restart_races.py::"
               "test_sigterm_while_the_mark_is_written_leaves_no_mark_and_the_owners_stop_stands",)),
    Mutation(
        id="28.2", file="rblnctl/vm/attach/recovery.py",
        old="        if life.settle_asked(plan.vm):  # the VM read back once: the stop landed",
        new="        if True:",
        what="stopped mark: a stop still being served when the signal came is taken for landed (the VM 'started "
             "again', then the stop lands)",
        tests=("tests/vm/test_restart_races.py::test_interrupted_while_its_stop_is_served_the_recovery_it_prints_is_true",)),
    Mutation(
        id="37.m1", file="rblnctl/vm/attach/plan.py",
        old="    if other is not None and not other.expired:",
        new="    if False:",
        what="stopped mark: a second run takes a live run's mark for an abandoned one (no liveness)",
        tests=("tests/vm/test_stopped_mark.py::test_a_second_run_refuses_while_the_mark_is_held_live_and_writes_nothing",)),
    Mutation(
        id="37.m2", file="rblnctl/vm/attach/marker.py",
        old="            if other is not None and other.holder != self.identity and not other.expired:",
        new="            if False:",
        what="stopped mark: a run that planned before another run took the mark writes its own over the live holder's",
        tests=("tests/vm/test_stopped_mark.py::test_a_run_that_planned_before_another_took_the_mark_writes_nothing_over_it",)),
    Mutation(
        id="37.m3", file="rblnctl/vm/attach/patcher.py",
        old="            return writes.patch(VMS, name, patch[:1] + guards + patch[1:], patch_type=\"json\", "
            "namespace=ns)",
        new="            return writes.patch(VMS, name, patch[:1] + patch[1:], patch_type=\"json\", namespace=ns)",
        what="restart: the NPU patch lands on a VM its owner started after rblnctl's stop (no run-state test)",
        tests=("tests/vm/test_other_actors.py::"
               "test_a_vm_its_owner_started_before_the_patch_is_not_changed_and_the_rerun_restarts_it",)),
    Mutation(
        id="37.m4", file="rblnctl/vm/attach/recovery.py",
        old="        else:  # the mark stays, held by no run: the re-run this names takes it at once",
        new="        elif False:  # the mark stays, held by no run: the re-run this names takes it at once",
        what="stopped mark: a run that leaves the VM stopped keeps holding its mark (its printed re-run refused)",
        tests=("tests/vm/test_stopped_mark.py::"
               "test_a_run_that_leaves_the_vm_stopped_releases_its_mark_so_the_printed_rerun_takes_it_at_once",)),
    Mutation(
        id="29.1", file="rblnctl/vm/attach/recovery.py",
        old="        life = self.restarter.bounded(C.CLEANUP_TIMEOUT_S) if interrupted else self.restarter",
        new="        life = self.restarter",
        what="clean-up: an interrupted restart retries its start for as long as an unresponsive virt-api answers 503",
        tests=("tests/vm/test_cleanup_deadline.py::"
               "test_an_interrupted_restart_gives_its_start_again_a_bounded_clean_up_and_says_what_is_left",)),
    Mutation(
        id="28.4", file="rblnctl/vm/attach/apply.py",
        old="        if restarter.ask_stop(plan.vm, uid=plan.uid):",
        new="        if restarter.ask_stop(plan.vm, uid=plan.uid) or True:",
        what="restart: a VM its owner stopped between the plan and the stop is started by rblnctl",
        tests=("tests/vm/test_restart_races.py::test_a_vm_its_owner_stopped_after_the_plan_is_changed_and_left_stopped",)),
    Mutation(
        id="28.5", file="rblnctl/vm/attach/plan.py",
        old="        elif any(d.get(\"name\") == device for d in D.host_devices(D.vm_spec(vm))):",
        new="        elif True:",
        what="vm detach --device: a device already gone is bad input, so re-running a detach cut short after its patch "
             "leaves the VM stopped",
        tests=("tests/vm/test_detach.py::test_a_rerun_of_a_detach_cut_short_after_its_patch_starts_the_vm_it_stopped",
               "tests/explore/test_crash_points.py::test_a_fault_at_any_write_ends_promptly_truthfully_and_the_"
               "recovery_finishes_the_job[vm-detach-restart-04-PATCH-virtualmachines-v1-3-sigterm]"),
        notes="found by the crash-point explorer"),
    Mutation(
        id="28.6", file="rblnctl/cli/vm/lifecycle.py",
        old='            elif seen is False and life.asked == "restart":',
        new='            elif False:',
        what="vm restart interrupted before virt-api had the request: 'vm start --wait follows it', which asks nothing "
             "of a running VM",
        tests=("tests/explore/test_crash_points.py::test_a_fault_at_any_write_ends_promptly_truthfully_and_the_"
               "recovery_finishes_the_job[vm-restart-01-PUT-v1-restart-sigint]",),
        notes="found by the crash-point explorer"),
    Mutation(
        id="27.10", file="rblnctl/constants.py",
        old='VMI_INFO_CONDITIONS = ("Ready", "LiveMigratable", "StorageLiveMigratable")',
        new='VMI_INFO_CONDITIONS = ("Ready",)',
        what="vm start --wait: LiveMigratable=False, on every VMI with NPUs, named as what holds the VM back",
        tests=("tests/vm/test_lifecycle.py::test_the_conditions_every_vm_with_npus_has_are_not_named_as_holding_it_back",),
        notes="found on the real-KubeVirt tier (test_listing_real.py)"),
    Mutation(
        id="27.9", file="rblnctl/vm/lifecycle.py",
        old=" and not self.ready and self.printable_status not in _MOVING",
        new="",
        what="vm stop --wait: stopped while the VM itself still says Stopping",
        tests=("tests/vm/test_restart_races.py::test_stop_wait_says_stopped_only_once_the_vm_says_so",)),
    Mutation(
        id="22.1", file="rblnctl/operator/capacity.py",
        old='    return bool((pod.get("spec") or {}).get("nodeName")) and \\\n'
            '        (pod.get("status") or {}).get("phase") not in FINISHED_PHASES',
        new='    return bool((pod.get("spec") or {}).get("nodeName")) and \\\n        True',
        what="capacity: a finished pod still holds its NPUs",
        tests=("tests/operator/test_capacity.py::test_finished_pods_hold_nothing_terminating_ones_do",)),
    Mutation(
        id="22.2", file="rblnctl/vm/placement.py",
        old='    if (node.get("spec") or {}).get("unschedulable") and not any(',
        new="    if False and not any(",
        what="vm fit: a cordoned node counts as a place a VM fits",
        tests=("tests/vm/test_fit.py::test_cordons_and_taints_the_vm_does_not_tolerate_exclude_a_node[cordoned]",)),
    Mutation(
        id="22.3", file="rblnctl/vm/lifecycle.py",
        old='        if not s.live and rs in ("Halted", "Manual", "RerunOnFailure"):',
        new="        if False:",
        what="vm stop: a stopped VM is asked to stop again (virt-api answers 409)",
        tests=("tests/vm/test_lifecycle.py::test_start_wait_then_stop_wait_and_each_again_is_a_no_op",
               "tests/cli/test_capacity.py::test_stop_frees_the_npus_and_start_takes_them_again")),
    Mutation(
        id="22.4", file="rblnctl/vm/lifecycle.py",
        old="                and self.attachment is not None and self.attachment.attached and not self.vmi_deleting\n",
        new="                and not self.vmi_deleting\n",
        what="vm start --wait: Ready is enough, whether or not the VMI's NPUs are attached",
        tests=("tests/vm/test_lifecycle.py::test_dra_npus_are_attached_when_the_launchers_claim_is_allocated",)),
    Mutation(
        id="22.5", file="rblnctl/vm/lifecycle.py",
        old="        return (not self.live and not self.launchers and not self.ready",
        new="        return (not self.live and not self.ready",
        what="vm stop --wait: done when the VMI finished, its virt-launcher (and its NPUs) still there",
        tests=("tests/vm/test_lifecycle.py::test_a_finished_vmi_whose_launcher_still_runs_is_not_stopped[Manual]",),
        notes="survived issue 22's tests: no fixture had a finished VMI whose launcher lingers; since issue 39 a "
              "Halted VM's finished VMI is itself a leftover, so the Manual case (its finished VMI stays) is the one "
              "only this rule decides"),
    Mutation(
        id="22.6", file="rblnctl/vm/lifecycle.py",
        old="            return None if landed(action, before, state) else w",
        new="            return w",
        what="vm start|stop|restart: a request whose reply was lost is sent again although it landed",
        tests=("tests/vm/test_lifecycle.py::test_a_lost_reply_is_settled_by_reading_the_vm_back",)),
    # -- what the two reviews of issue 22 found: each fix, and the test that now guards it --------------------------
    Mutation(
        id="22.7", file="rblnctl/operator/capacity.py",
        old="    slices = current_slices(slices)",
        new="    slices = list(slices)",
        what="capacity: a pool's older generation of ResourceSlices counts beside the newest (devices twice)",
        tests=("tests/operator/test_capacity.py::test_only_the_newest_generation_of_a_pool_counts",),
        notes="found by the domain review"),
    Mutation(
        id="22.8", file="rblnctl/operator/capacity.py",
        old='            if r.get("adminAccess"):',
        new="            if False:",
        what="capacity: a device allocated with adminAccess counts as held",
        tests=("tests/operator/test_capacity.py::test_admin_access_results_do_not_hold_devices",),
        notes="found by both reviews"),
    Mutation(
        id="22.9", file="rblnctl/vm/lifecycle.py",
        old="        if s.stopping:  # virt-api would answer 409",
        new="        if False:  # virt-api would answer 409",
        what="vm start: a VM still stopping is 'already running' and the start is lost",
        tests=("tests/vm/test_lifecycle.py::test_start_of_a_vm_still_stopping_starts_it_once_stopped",),
        notes="found by the hostile review"),
    Mutation(
        id="22.10", file="rblnctl/vm/lifecycle.py",
        old="                and self.attachment is not None and self.attachment.attached and not self.vmi_deleting\n"
            "                and not self.requests)",
        new="                and self.attachment is not None and self.attachment.attached and True\n"
            "                and not self.requests)",
        what="vm start --wait: the old VMI of a restart under way counts as Ready",
        tests=("tests/vm/test_lifecycle.py::test_start_wait_does_not_call_a_vmi_on_its_way_out_ready[deleting]",),
        notes="found by the hostile review"),
    Mutation(
        id="22.11", file="rblnctl/vm/lifecycle.py",
        old='        if not s.live and rs == "RerunOnFailure" and s.vmi_phase == "Failed":',
        new="        if False:",
        what="vm stop: a RerunOnFailure VM whose VMI failed (KubeVirt runs it again) is 'already stopped'",
        tests=("tests/vm/test_lifecycle.py::test_a_rerun_on_failure_vm_whose_vmi_failed_is_not_called_stopped",),
        notes="found by the hostile review"),
    # -- issue 27: what real KubeVirt v1.9.0 answers (the Accept header, aggregated APIs, Warning headers) ---------
    Mutation(
        id="27.1", file="rblnctl/kube/client.py",
        old='ACCEPT = f"{JSON}, */*"', new="ACCEPT = JSON",
        what="Accept: application/json alone (virt-api's start/stop/restart answer 406)",
        tests=("tests/kube/test_client.py::test_every_request_accepts_json_and_anything_as_client_go_does",
               "tests/cli/test_cluster_errors.py::test_vm_start_is_served_by_virt_api_which_406s_an_accept_without_any_type"),
        notes="the bug issue 27 found on real KubeVirt; the fake now 406s as virt-api does"),
    Mutation(
        id="27.2", file="rblnctl/kube/client.py",
        old="            if api is not None:", new="            if False:",
        what="a non-Status reply from an aggregated API is 'not the Kubernetes API: is the server URL right?'",
        tests=("tests/kube/test_client.py::test_a_406_from_virt_api_names_the_aggregated_api_not_a_wrong_server_url",
               "tests/kube/test_client.py::test_an_unreachable_virt_api_is_the_aggregators_503_naming_why_its_apiservice_"
               "is_unavailable",
               "tests/cli/test_cluster_errors.py::test_an_unreachable_virt_api_is_named_with_its_apiservice_exit_1_"
               "not_a_wrong_server_url"),
        notes="the misdiagnosis issue 27 found"),
    Mutation(
        id="27.3", file="rblnctl/kube/client.py",
        old="        if groups is None or (mux_404 and group not in groups):", new="        if groups is None:",
        what="aggregated APIs: a group /apis does not list (not installed) still costs an APIService read",
        tests=("tests/kube/test_client.py::test_a_group_not_installed_costs_no_apiservice_read",)),
    Mutation(
        id="27.4", file="rblnctl/kube/client.py",
        old="                if group in groups:", new="                if False:",
        what="aggregated APIs: an APIService RBAC hides makes a listed group 'not an API server'",
        tests=("tests/kube/test_client.py::test_an_apiservice_rbac_hides_is_still_named_from_discovery",)),
    Mutation(
        id="27.5", file="rblnctl/kube/client.py",
        old="                self._api_services[name] = aggregated_api(name, obj)",
        new="                self._api_services[name] = AggregatedApi(name)",
        what="aggregated APIs: a Local APIService (kube-apiserver's own groups, CRDs) counts as aggregated",
        tests=("tests/kube/test_client.py::test_a_text_reply_under_a_local_group_or_a_core_path_is_still_not_an_api_server",)),
    Mutation(
        id="27.6", file="rblnctl/kube/client.py",
        old="            self._report_warnings(resp)", new="            pass",
        what="the replies' Warning headers are dropped",
        tests=("tests/kube/test_warning_headers.py::test_every_write_reply_hands_its_warnings_to_on_warning",
               "tests/cli/test_kubevirt.py::test_the_kubevirt_webhooks_warnings_are_printed_as_kubectl_prints_them_"
               "and_stdout_stays_json",
               "tests/cli/test_kubevirt.py::test_a_server_dry_run_shows_the_warnings_too_and_an_unchanged_list_none"),
        notes="what issue 27 found: rblnctl printed none of the KubeVirt webhook's warnings"),
    Mutation(
        id="27.7", file="rblnctl/cli/console.py",
        old="            if text in self._seen:", new="            if False:",
        what="server warnings: the same text printed again (kubectl prints each once)",
        tests=("tests/kube/test_warning_headers.py::test_the_cli_prints_each_299_warning_once_as_kubectl",)),
    Mutation(
        id="27.8", file="rblnctl/cli/console.py",
        old="        if code != 299 or not text:", new="        if not text:",
        what="server warnings: a code other than 299 printed (kubectl prints 299 only)",
        tests=("tests/kube/test_warning_headers.py::test_the_cli_prints_each_299_warning_once_as_kubectl",)),
    # -- issue 27, scheduler fidelity: what the real kube-scheduler weighs beside the NPUs ------------------------
    Mutation(
        id="27.s1", file="rblnctl/vm/placement.py",
        old="    if want is None or have == want:",
        new="    if True:",
        what="vm fit: a node without kubevirt.io/schedulable=true (no virt-handler) counts as a place a VM fits",
        tests=("tests/vm/test_fit.py::test_a_node_without_kubevirt_schedulable_fits_no_vm[no-label]",
               "tests/vm/test_diagnose.py::test_no_node_offering_its_npus_with_kubevirt_schedulable_is_the_broken_link"),
        notes="found on the real tier: tests/kubevirt_real/test_scheduler_agrees.py"),
    Mutation(
        id="27.s2", file="rblnctl/vm/placement.py",
        old="    return dataclasses.replace(placement, kubevirt_selector={C.KUBEVIRT_SCHEDULABLE_LABEL: \"true\", "
            "**own, **extra})",
        new="    return placement",
        what="vm fit: the KubeVirt CR's developerConfiguration.nodeSelectors are not weighed",
        tests=("tests/vm/test_fit.py::test_the_kubevirt_crs_cluster_wide_node_selectors_count_too",)),
    Mutation(
        id="27.s3", file="rblnctl/operator/capacity.py",
        old="        if not all(any(tolerates(t, taint) for t in request) for request in (requests or ((),))):",
        new="        if False:",
        what="capacity: a DRA device with a NoSchedule/NoExecute taint counts free for a request that does not "
             "tolerate it",
        tests=("tests/operator/test_capacity.py::"
               "test_a_device_taint_the_request_does_not_tolerate_keeps_the_device_from_free[NoSchedule]",
               "tests/vm/test_fit.py::test_dra_a_device_taint_keeps_the_device_from_the_vm"),
        notes="found on the real tier: tests/kubevirt_real/test_scheduler_agrees.py"),
    Mutation(
        id="27.s4", file="rblnctl/operator/capacity.py",
        old="        if not isinstance(taint, Mapping) or taint.get(\"effect\") not in C.DRA_BLOCKING_TAINT_EFFECTS:",
        new="        if not isinstance(taint, Mapping):",
        what="capacity: a device taint of effect None keeps the device from every request",
        tests=("tests/operator/test_capacity.py::"
               "test_a_device_taint_the_request_does_not_tolerate_keeps_the_device_from_free[None]",)),
    Mutation(
        id="27.s5", file="rblnctl/vm/diagnose/links.py",
        old='    rest = re.split(r"\\.(?:\\s+|$)", m.group(3).strip(), maxsplit=1)[0].strip()',
        new='    rest = re.split(r"\\.\\s+preemption:", m.group(3), maxsplit=1)[0].strip().rstrip(".")',
        what="vm diagnose: kube-scheduler 1.36's PostFilter sentence is read as part of the last reason",
        tests=("tests/vm/test_diagnose.py::test_parse_failed_scheduling_as_kube_scheduler_1_36_writes_it",)),
    # -- issue 37: other actors on the DRA and conversion paths ----------------------------------------------------
    Mutation(
        id="37.d1", file="rblnctl/vm/attach/plan.py",
        old="            patch[1:1] = value_tests(vm, RUN_STATE)",
        new="            pass",
        what="vm attach: a stopped VM's NPU patch no longer tests how it runs (an owner's start slips under it)",
        tests=("tests/vm/test_dra_other_actors.py::test_a_vm_started_after_the_read_is_not_patched_as_stopped",)),
    Mutation(
        id="37.d2", file="rblnctl/vm/attach/apply.py",
        old="                still_the_vm(self.reader, plan)",
        new="                pass",
        what="vm attach: a VM re-created after its patch is reported done (no read-back of the uid)",
        tests=("tests/vm/test_dra_other_actors.py::test_a_vm_recreated_after_its_patch_is_not_reported_done",)),
    Mutation(
        id="37.d3", file="rblnctl/method/changer.py",
        old="                vm_plan = planner.plan(c.vm.name, c.vm.namespace, uid=c.uid,",
        new="                vm_plan = planner.plan(c.vm.name, c.vm.namespace, uid=None,",
        what="set-method --convert-vms: the conversion plans the VM by name again (a re-created one is converted)",
        tests=(_CONVERT_IDENTITY + "test_a_vm_recreated_after_the_plan_is_reported_replaced_and_not_converted",)),
    Mutation(
        id="37.d4", file="rblnctl/method/changer.py",
        old="        planner = AttachPlanner(kube=self.kube, clock=self.clock, guard=still_selected,",
        new="        planner = AttachPlanner(kube=self.kube, clock=self.clock, guard=None,",
        what="set-method --convert-vms: the policy is not read again before each VM write",
        tests=(_CONVERT_IDENTITY + "test_a_policy_switched_back_between_the_template_create_and_the_vm_patch_stops_"
               "the_conversions",)),
    Mutation(
        id="37.d5", file="rblnctl/vm/attach/templates.py",
        old="    return not (obj is None or (obj.get(\"metadata\") or {}).get(\"uid\") != uid "
            "or not D.is_managed(obj))",
        new="    return not (obj is None or not D.is_managed(obj))",
        what="vm attach: the template a VM left is deleted by name, whatever object holds that name now",
        tests=("tests/vm/test_dra_other_actors.py::test_the_rerun_leaves_a_left_template_that_is_another_object_or_in_"
               "use",)),
    Mutation(
        id="37.d6", file="rblnctl/vm/attach/plan.py",
        old="        patch += left_ops(vm, left)",
        new="        pass",
        what="vm attach: the NPU patch records no template it moves the VM off (an interrupted run's is left for ever)",
        tests=("tests/vm/test_dra_other_actors.py::test_the_rerun_of_an_attach_interrupted_before_its_template_delete_"
               "deletes_that_template",)),
    # -- issue 29: the package graph docs/architecture.md draws, no package circle --------------------------------
    Mutation(
        id="29.g1", file="rblnctl/vm/listing.py",
        old="from rblnctl.kube import VMIS, VMS, Change, Kube, Mirror, Resource, WatchSpec, watch_many",
        new="from rblnctl.kube import VMIS, VMS, Kube, Mirror, Resource, WatchSpec, watch_many; "
            "from rblnctl.node.inventory import Change",
        what="package graph: vm/listing.py takes the --watch Change from node/ again (the node <-> vm circle)",
        tests=("tests/test_layers.py::test_no_package_circles",
               "tests/test_layers.py::test_every_package_imports_only_what_the_drawing_allows")),
    Mutation(
        id="29.g2", file="rblnctl/kubevirt/gates.py",
        old="from rblnctl.versions import format_version, parse_version",
        new="from rblnctl.versions import format_version, parse_version; from rblnctl.vm import guard  # noqa",
        what="package graph: kubevirt/ imports the VM guard again (the kubevirt <-> vm circle)",
        tests=("tests/test_layers.py::test_no_package_circles",
               "tests/test_layers.py::test_every_package_imports_only_what_the_drawing_allows")),
    # -- issue 42: set-mode --rehearse, the pure planner ---------------------------------------------------------
    Mutation(
        id="42.r1", file="rblnctl/node/rehearse/plan.py",
        old="                    if likely in runnable[i + size:]:",
        new="                    if False:",
        what="rehearsal: a replacement placed on a later wave's node is not evicted again there",
        tests=("tests/node/test_rehearse.py::test_a_replacement_placed_on_a_later_waves_node_is_evicted_again_there",)),
    Mutation(
        id="42.r2", file="rblnctl/node/rehearse/plan.py",
        old="        block = allowed == 0",
        new="        block = False",
        what="rehearsal: a budget that allows no eviction is not predicted to fail its node",
        tests=("tests/node/test_rehearse.py::"
               "test_a_budget_allowing_none_fails_its_node_and_later_waves_are_not_started",
               "tests/cli/node/test_rehearse.py::"
               "test_a_budget_that_allows_nothing_is_predicted_to_fail_the_first_node_and_stop_the_pool")),
    Mutation(
        id="42.r3", file="rblnctl/node/rehearse/plan.py",
        old="        if resource in self.old and (node in self.switched or node in cordoned):",
        new="        if resource in self.old and node in cordoned:",
        what="rehearsal: a switched node still offers the old mode's NPUs to the pods that move",
        tests=("tests/node/test_rehearse.py::test_a_replacement_placed_on_a_later_waves_node_is_evicted_again_there",)),
    # -- issue 42: set-mode's facts -> plan -> apply, the pure mode planner ----------------------------------------
    Mutation(
        id="42.m1", file="rblnctl/node/mode/plan.py",
        old="    if converged and record is None and not facts.lock_blockers:",
        new="    if converged and record is None:",
        what="set-mode plan: a node already in its mode is a no-op even while another run holds its lock",
        tests=("tests/node/test_mode_plan.py::test_a_noop_still_waits_for_another_runs_lock",)),
    Mutation(
        id="42.m2", file="rblnctl/node/mode/plan.py",
        old="    blockers = [] if evict_vms else [vm_blocker(v, node) for v in vms]",
        new="    blockers = []",
        what="set-mode plan: a running VM holding the node's NPUs no longer blocks the switch",
        tests=("tests/node/test_mode_plan.py::test_a_running_vm_holding_npus_blocks_the_switch_and_is_named",)),
    Mutation(
        id="42.m3", file="rblnctl/node/mode/rules.py",
        old="    if record is not None and record.target != target and not options.reverse:",
        new="    if record is not None and record.target != target and False:",
        what="set-mode gate: an unfinished switch to the other mode is taken over without --reverse",
        tests=("tests/node/test_mode_plan.py::test_an_unfinished_switch_to_the_other_mode_is_refused_without_reverse",
               "tests/node/test_mode.py::test_conflicting_target_with_force_takes_over")),
    Mutation(
        id="40.c1", file="rblnctl/operator/convergence.py",
        old="    out.extend(_pods(name, target, deploy, [*must, *(a for a in allocators if deploy.is_set(a))], pods, "
            "now, labels))",
        new="    out.extend(_pods(name, target, deploy, must, pods, now, labels))",
        what="convergence: a deployed allocator with no pod on the node yet is judged by allocatable alone",
        tests=("tests/operator/test_convergence.py::test_no_allocator_pod_yet_is_pending_whatever_allocatable_says",),
        notes="a stuck-switch fixture once converged in CI on the real stack"),
)


def by_id(ids: list[str]) -> list[Mutation]:
    known = {m.id: m for m in MUTATIONS}
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise SystemExit(f"unknown mutation(s): {', '.join(unknown)} (see --list)")
    return [known[i] for i in ids] if ids else list(MUTATIONS)


def markdown(mutations: list[Mutation]) -> str:
    """The rows of docs/testing.md's "Mutation checks" table."""
    def short(node: str) -> str:
        path, _, name = node.partition("::")
        return f"`{path.removeprefix('tests/')}::{name}`"

    rows = []
    for m in mutations:
        tests = "<br>".join(short(t) for t in m.tests)
        cell = (f"caught by {tests}" + (f" ({m.notes})" if m.notes else "")) if m.expect == "caught" else \
            f"**survives**, exercised by {tests}: {m.notes}"
        rows.append(f"| {m.id} | `{m.file.removeprefix('rblnctl/')}` | {m.what} | {cell} |")
    return "\n".join(rows)


def apply(m: Mutation) -> tuple[Path, bytes, os.stat_result]:
    """Rewrite the file with the mutation; returns what restore() needs."""
    path = ROOT / m.file
    original = path.read_bytes()
    st = path.stat()
    text = original.decode()
    if text.count(m.old) != 1:
        raise SystemExit(f"{m.id}: the line to mutate occurs {text.count(m.old)} times in {m.file}, not once")
    path.write_text(text.replace(m.old, m.new))
    return path, original, st


def restore(path: Path, original: bytes, st: os.stat_result) -> None:
    """Put the original bytes and mtime back, and drop bytecode compiled from the mutated file."""
    path.write_bytes(original)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    for pyc in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
        pyc.unlink(missing_ok=True)


def pytest(tests: list[str], *, first: bool = False) -> tuple[int, list[str]]:
    """Run the tests (`first`: stop at the first failure); (pytest's exit code, the node ids that failed)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-B", "-m", "pytest", *(["-x"] if first else []), "-q", "-rf", "-p", "no:cacheprovider",
           *tests]
    out = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if out.returncode not in (0, 1):
        sys.stderr.write(out.stdout[-3000:])
    failed = [line.split()[1] for line in out.stdout.splitlines() if line.startswith("FAILED ")]
    return out.returncode, failed


def _interrupted(*_: object) -> None:
    raise KeyboardInterrupt


def verdict(m: Mutation, rc: int, failed: list[str], *, own_tests: bool) -> str:
    """CAUGHT: the tests failed (each test the mutation names, when its own were run); PARTLY: some of its tests
    passed with it; SURVIVED: none failed; ERROR: pytest could not run them."""
    if rc not in (0, 1):
        return f"ERROR (pytest exit {rc})"
    if rc == 0:
        return "SURVIVED"
    if own_tests and any(not any(f == t or f.startswith(t + "[") for f in failed) for t in m.tests):
        return "PARTLY"
    return "CAUGHT"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ids", nargs="*", help="mutation ids (default: all)")
    ap.add_argument("--list", action="store_true", help="print the catalogue and exit")
    ap.add_argument("--markdown", action="store_true", help="print docs/testing.md's table rows and exit")
    ap.add_argument("--scope", action="append", default=[],
                    help="run these tests (paths or node ids) instead of the mutation's own; repeatable")
    ap.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    args = ap.parse_args(argv)
    chosen = by_id(args.ids)
    if args.markdown:
        print(markdown(chosen))
        return 0
    if args.list:
        for m in chosen:
            print(f"{m.id:6} {m.file}: {m.what}\n       - {m.old.strip()}\n       + {m.new.strip()}")
            for t in m.tests:
                print(f"       {'caught' if m.expect == 'caught' else 'survives (exercised)'} by {t}")
            if m.notes:
                print(f"       note: {m.notes}")
        return 0
    signal.signal(signal.SIGTERM, _interrupted)  # restore the file on `kill` too
    if not args.no_baseline:
        union = sorted(set(args.scope) or {t for m in chosen for t in m.tests})
        rc, failed = pytest(union)
        if rc != 0:
            print(f"baseline: {', '.join(failed) or 'pytest exit ' + str(rc)}", file=sys.stderr)
            print("baseline: the tests fail without any mutation; fix that first", file=sys.stderr)
            return 2
    rows = []
    for m in chosen:
        tests = list(args.scope) or list(m.tests)
        start = time.monotonic()
        path, original, st = apply(m)
        try:
            rc, failed = pytest(tests, first=bool(args.scope))
        finally:
            restore(path, original, st)
        result = verdict(m, rc, failed, own_tests=not args.scope)
        ok = result == ("CAUGHT" if m.expect == "caught" else "SURVIVED")
        rows.append((m, result, ok))
        print(f"{m.id:6} {result:9} {time.monotonic() - start:5.1f}s  {m.file}: {m.what}", flush=True)
        for f in failed:
            print(f"       by {f}", flush=True)
    bad = [m.id for m, _, ok in rows if not ok]
    tail = f"; not as expected: {', '.join(bad)}" if bad else ""
    print(f"{len(rows) - len(bad)} of {len(rows)} as expected{tail}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
