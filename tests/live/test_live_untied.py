"""The live path untied (issue 34, part 2): each of its pieces calls only what is below it.

- the wiring starts the alerts and the purges beside the live path;
"""

import asyncio

import pytest

from rtvi_monitor.live import lifecycle

live_path = pytest.mark.usefixtures("live_path")


# --- 5. the wiring starts what runs in every server process ----------------------------------------------------


@live_path
async def test_the_wiring_starts_the_live_path_the_alerts_and_the_purges_once(monkeypatch):
    from rtvi_monitor import apps
    from rtvi_monitor.alerts import rules as alerts
    from rtvi_monitor.live import process
    from rtvi_monitor.privacy import retention

    async def idle():
        await asyncio.sleep(3600)

    monkeypatch.setattr(alerts, "run", idle)
    monkeypatch.setattr(retention, "run", idle)
    assert not hasattr(process, "start_server")
    loop = asyncio.get_running_loop()
    apps.start_server()
    started = [alerts._tasks[loop], retention._tasks[loop], lifecycle._tasks[loop]]
    assert not any(task.done() for task in started)
    apps.start_server()  # whatever starts them again: the same tasks
    assert [alerts._tasks[loop], retention._tasks[loop], lifecycle._tasks[loop]] == started
    for task in started[:2]:
        task.cancel()
