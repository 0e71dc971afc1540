"""codefix: real (tiny) Python repositories with one bug, a sandbox, and an isolated verifier.

Public API: :func:`list_tasks`, :func:`load_task` (``Task.repo_dir``, ``Task.editable``,
``Task.reference``) and :func:`verify` (``verify(task, workspace_dir) -> Verdict``). The agent-facing
environment is :class:`agentjax.envs.codefix.env.CodefixEnv`. See docs/codefix.md.
"""

from agentjax.envs.codefix.api import Task, TaskInvalid, list_tasks, load_task, verify

__all__ = ["Task", "TaskInvalid", "list_tasks", "load_task", "verify"]
