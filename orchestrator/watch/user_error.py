"""A job that ended on a mistake of the user's (orchestrator/cluster/entry.py `user_errors`: exit USER_ERROR_EXIT,
its message and fix in <run_dir>/user_error.json): how the watcher tells one, and what it keeps of it beside the
cell's final status `user_error` (shown by `orchestrate status`). Reads one small file, only for such a job.
"""

from __future__ import annotations

from orchestrator.cluster.entry import USER_ERROR_EXIT, USER_ERROR_FIX
from orchestrator.launch.ledger import KINDS, latest
from record.files import read_json
from record.rundir import RunDir


def is_user_error(job: dict) -> bool:
    return job["state"] == "FAILED" and job.get("exit_code") == f"{USER_ERROR_EXIT}:0"


def user_error_of(record: dict) -> dict | None:
    """<run_dir>/user_error.json, read only where the cell's latest job of a kind exited USER_ERROR_EXIT."""
    ended = [latest(record, kind) for kind in KINDS]
    if record.get("final") or not any(j and j.get("exit_code") == f"{USER_ERROR_EXIT}:0" for j in ended):
        return None
    return read_json(RunDir(record["run_dir"]).user_error)


def error_of(user_error: dict | None, job: dict, key: str) -> dict:
    """The job's own message and fix (user_error.json, when it names this job or no job), else where to look."""
    if user_error and user_error.get("message") and user_error.get("job_id") in (None, "", job.get("job_id")):
        return {"message": str(user_error["message"]), "fix": str(user_error.get("fix") or USER_ERROR_FIX)}
    return {"message": f"the job exited {USER_ERROR_EXIT} (a user error) without its user_error.json; see "
                       f"`orchestrate logs {key}`", "fix": USER_ERROR_FIX}
