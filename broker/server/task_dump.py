"""Every trio task's await stack, on SIGUSR1: what a broker that answers nothing is waiting for.

A thread dump (py-spy, faulthandler) of a stuck trio process shows only an idle event loop; the
waits are in the tasks. This is triolog's jstack: ``kill -USR1 <pid>`` writes one ``task_dump``
log line with each task's name and the frames it is suspended in, innermost last.
"""

from __future__ import annotations

import signal

import structlog
import trio

logger = structlog.get_logger("triolog.server")


def task_stacks() -> dict[str, list[str]]:
    """Each task (by name, numbered when names repeat) and its suspended frames."""
    stacks: dict[str, list[str]] = {}
    pending = [trio.lowlevel.current_root_task()]
    while pending:
        task = pending.pop()
        if task is None:
            continue
        frames = [f"{f.f_code.co_filename}:{lineno} {f.f_code.co_name}" for f, lineno in task.iter_await_frames()]
        name = task.name
        number = 2
        while name in stacks:
            name, number = f"{task.name}#{number}", number + 1
        stacks[name] = frames
        for nursery in task.child_nurseries:
            pending.extend(nursery.child_tasks)
    return stacks


async def dump_tasks_on_signal() -> None:
    """Log the tasks' stacks at every SIGUSR1, until cancelled."""
    with trio.open_signal_receiver(signal.SIGUSR1) as signals:
        async for _ in signals:
            logger.warning("task_dump", tasks=task_stacks())
