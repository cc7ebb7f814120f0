"""The Evals page: the user's eval sets (from "Test case" under an answer, or a YAML or JSON file), run on the
app's model with repeats and seeds, each run's report kept with its set, and what changed since the previous run
(a case that went from passing to failing is a regression). Answers rated down are offered as new cases."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import streamlit as st

from app.compare.targets import Target
from app.evals.cases import ContainsCheck, EvalCase, EvalSet
from app.evals.files import EvalFileError, parse_set, set_to_json, set_to_yaml
from app.evals.judge import judge_from
from app.evals.library import EvalLibraryError, add_case, save_set, stored_set, thumbs_down_candidates
from app.evals.report import changes, report
from app.evals.runner import run_set
from app.frontends.streamlit import persistence, sidebar
from app.frontends.streamlit.client_cache import load_client
from app.frontends.streamlit.safe_markdown import safe_label, safe_markdown
from app.storage.errors import StorageError
from app.storage.eval_sets import EvalSetStore
from app.storage.feedback import FeedbackStore
from app.tools import load_tools

_CHOSEN = "evals/chosen"


def render() -> None:
    st.title("Evals")
    st.caption("Turns kept as test cases, grouped in eval sets and run on the model with repeats: pass rates with "
               "their 95% interval, and every case that got worse since the last run. Save a turn with **Test "
               "case** under an answer, or import a YAML or JSON file.")
    owner = persistence.owner()
    if owner is None:
        st.info("Sign in to keep eval sets.", icon=":material/login:")
        return
    store = persistence.store_of(EvalSetStore)
    try:
        names = [stored.name for stored in store.list(owner)]
    except StorageError as exc:
        st.warning(safe_markdown(f"The eval sets could not be read: {exc}"), icon=":material/cloud_off:")
        return
    _import(store, owner)
    if not names:
        st.caption("No eval set yet.")
    else:
        chosen = st.selectbox("Eval set", names, key=_CHOSEN)
        if chosen:
            _show(store, owner, chosen)
    _candidates(store, owner)


def _import(store: EvalSetStore, owner: str) -> None:
    with st.popover("Import a set", icon=":material/upload_file:"):
        upload = st.file_uploader("A YAML or JSON eval set", type=["yaml", "yml", "json"], key="evals/import")
        replace = st.checkbox("Replace my set of the same name", key="evals/replace")
        if upload is not None and st.button("Import", key="evals/import_button", type="primary"):
            try:
                imported = parse_set(upload.getvalue(), upload.name)
                save_set(store, owner, imported, replace=replace)
            except (EvalFileError, EvalLibraryError, StorageError) as exc:
                st.error(safe_markdown(str(exc)), icon=":material/error:")
                return
            st.session_state[_CHOSEN] = imported.name
            st.success(safe_markdown(f"Imported **{imported.name}**: {len(imported.cases)} cases."))


def _show(store: EvalSetStore, owner: str, name: str) -> None:
    try:
        found = stored_set(store, owner, name)
    except (EvalLibraryError, StorageError) as exc:
        st.error(safe_markdown(str(exc)), icon=":material/error:")
        return
    if found is None:
        return
    eval_set, _ = found
    st.dataframe([{"case": case.name, "question": case.question[:120], "page": case.page,
                   "checks": ", ".join(check.type for check in case.checks),
                   "model-judged": "yes" if case.model_judged else ""} for case in eval_set.cases],
                 hide_index=True, width="stretch")
    row = st.columns(3)
    row[0].download_button("Export YAML", set_to_yaml(eval_set), f"{name}.yaml", "application/yaml",
                           key="evals/export_yaml", icon=":material/download:")
    row[1].download_button("Export JSON", set_to_json(eval_set), f"{name}.json", "application/json",
                           key="evals/export_json", icon=":material/download:")
    with row[2].popover("Delete the set", icon=":material/delete:"):
        st.write(safe_markdown(f"Deletes **{name}**, its {len(eval_set.cases)} cases and its runs."))
        if st.button("Delete", key="evals/delete", type="primary"):
            try:
                store.delete(owner, name)
            except StorageError as exc:
                st.error(safe_markdown(f"The set could not be deleted: {exc}"), icon=":material/error:")
                return
            st.session_state.pop(_CHOSEN, None)
            st.rerun()
    _run(store, owner, eval_set)


def _run(store: EvalSetStore, owner: str, eval_set: EvalSet) -> None:
    settings = sidebar.current()
    label = sidebar.model_name(settings.model)
    st.subheader("Run it")
    columns = st.columns(2)
    repeats = columns[0].number_input("Repeats of each case", 1, 20, 1, key="evals/repeats")
    seed = columns[1].number_input("First seed", 0, 2**31 - 1, 0, key="evals/seed")
    if st.button(f"Run on {label}", key="evals/run", type="primary", icon=":material/play_arrow:"):
        client = load_client(settings.model)  # the picker's model: loaded once, shared
        if client is None:
            return  # the page said why the model did not load
        target = Target(label=label, settings=settings.model, params=settings.params,
                        system_prompt=settings.system_prompt)
        started = datetime.now(UTC)
        bar = st.progress(0.0, text="Starting...")
        total = len(eval_set.cases) * int(repeats)
        done: list[Any] = []

        def advance(run: Any) -> None:
            done.append(run)
            bar.progress(len(done) / total, text=f"{len(done)} of {total} runs")

        try:
            runs = run_set(eval_set, [target], lambda _settings: client, load_tools(), repeats=int(repeats),
                           seed=int(seed), on_run=advance, judge=judge_from([target], lambda _settings: client))
        except ValueError as exc:
            st.error(safe_markdown(str(exc)), icon=":material/error:")
            return
        except Exception as exc:  # an engine's fault ends this run with a message, never the page
            st.error(safe_markdown(f"The run failed: {type(exc).__name__}: {exc}"), icon=":material/error:")
            return
        written = report(eval_set.name, runs, [target.describe()], started)
        previous: list[dict[str, Any]] = []
        try:
            previous = store.runs(owner, eval_set.name, limit=1)
            store.add_run(owner, eval_set.name, written)
        except (LookupError, StorageError) as exc:  # the set deleted in another tab meanwhile, or the database down
            st.warning(safe_markdown(f"This run could not be kept with its set ({exc}); its results are below."),
                       icon=":material/cloud_off:")
        _results(written, previous[0] if previous else None)
    else:
        try:
            latest = store.runs(owner, eval_set.name, limit=2)
        except StorageError as exc:
            st.warning(safe_markdown(f"The set's earlier runs could not be read: {exc}"), icon=":material/cloud_off:")
            return
        if latest:
            st.caption(f"The last run, {latest[0]['finished'][:16].replace('T', ' ')} UTC:")
            _results(latest[0], latest[1] if len(latest) > 1 else None)


def _results(written: dict[str, Any], previous: dict[str, Any] | None) -> None:
    st.dataframe([{"target": s["target"], "pass rate": None if s["pass_rate"] is None else round(100 * s["pass_rate"]),
                   "95% interval": f"{100 * s['ci_low']:.0f}–{100 * s['ci_high']:.0f}%", "passed": s["passed"],
                   "runs": s["runs"], "median s": _rounded(s["median_latency_s"]),
                   "median tokens": s["median_tokens"],
                   "tool calls valid": f"{s['valid_tool_calls']}/{s['tool_calls']}",
                   "model-judged checks": s["model_judged_checks"]} for s in written["summary"]],
                 hide_index=True, width="stretch")
    if previous is not None:
        found = changes(previous, written)
        for change in found:
            text = safe_markdown(f"**{change.case}** on {change.target}: {change.before} → {change.after}")
            (st.error if change.regression else st.info)(("Regression: " if change.regression else "") + text)
        if not found:
            st.caption("No case changed since the run before.")
    with st.expander("Every run"):
        st.dataframe([{"case": r["case"], "repeat": r["repeat"] + 1, "seed": r["seed"],
                       "passed": "yes" if r["passed"] else "no",
                       "why": "; ".join(c["detail"] + (" (model-judged)" if c["model_judged"] else "")
                                        for c in r["checks"] if not c["passed"]),
                       "answer": r["answer"][:200]} for r in written["runs"]], hide_index=True, width="stretch")


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 2)


def _candidates(store: EvalSetStore, owner: str) -> None:
    try:
        found = thumbs_down_candidates(persistence.store_of(FeedbackStore), owner)
    except StorageError:
        return
    if not found:
        return
    with st.expander(f"Answers you rated down ({len(found)}): candidates for test cases",
                     icon=":material/thumb_down:"):
        for index, candidate in enumerate(found[:50]):
            st.markdown(safe_markdown(f"**{candidate.question[:200]}** · {candidate.model or 'model not recorded'}"))
            st.caption(safe_markdown(f"Answered: {candidate.answer[:300]}" +
                                     (f" · Your comment: {candidate.comment}" if candidate.comment else "")))
            with st.form(key=f"evals/candidate/{index}", border=False):
                text = st.text_input("The right answer contains", key=f"evals/candidate_text/{index}")
                target_set = st.text_input("Into the set", value=st.session_state.get(_CHOSEN) or "My evals",
                                           key=f"evals/candidate_set/{index}")
                if st.form_submit_button("Add as a test case"):
                    _add_candidate(store, owner, target_set.strip(), candidate.question, text)


def _add_candidate(store: EvalSetStore, owner: str, set_name: str, question: str, text: str) -> None:
    if not text.strip():
        st.error("Say what the right answer contains.")
        return
    try:
        case = EvalCase(name=question[:60] or "case", messages=[{"role": "user", "content": question}],  # type: ignore[list-item]
                        checks=[ContainsCheck(type="contains", text=text.strip())])
        stored = add_case(store, owner, set_name or "My evals", case)
    except (ValueError, EvalLibraryError, StorageError) as exc:
        st.error(safe_markdown(str(exc)))
        return
    st.success(safe_label(f"Added {stored} to {set_name}."))
