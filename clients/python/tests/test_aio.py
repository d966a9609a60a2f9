"""flowbus.aio end to end against the real daemons (flowd, reactor-host --host demo) of `swift build`."""

import asyncio

import pytest

from flowbus import DidNavigate, Step, aio

T = 5.0  # every wait is bounded by this many seconds


def test_async_stepper_publishes_and_events_see_the_navigation(bus):
    async def scenario():
        async with aio.Events(bus.events, ["nav/did/"], timeout=T) as events, \
                aio.Stepper(bus.ingress, "apikey", timeout=T) as stepper:
            receipt = await stepper.publish("apiKeyIsComplete")
            assert receipt.sequence == 1 and receipt.ack.acked_sequence >= 1
            did = await events.wait_for(lambda m: isinstance(m, DidNavigate) and m.step == "apiKeyIsComplete")
            assert did.flow == "MainFlow" and did.presentable == "apikey"
    asyncio.run(scenario())


def test_async_stepper_reports_routing_refusals_and_outcomes(bus):
    async def scenario():
        async with aio.Stepper(bus.ingress, "apikey", timeout=T, events_endpoint=bus.events) as stepper:
            with pytest.raises(aio.Refused) as refused:
                await stepper.publish("noSuchStep")
            assert refused.value.reason == "unknown-step" and refused.value.sequence == 1
            assert (await stepper.publish("apiKeyIsComplete", wait=True)).sequence == 2
        async with aio.Stepper(bus.ingress, "watched/movies", timeout=T, events_endpoint=bus.events) as stepper:
            with pytest.raises(aio.Dropped) as dropped:
                await stepper.publish("moviePicked", wait=True, withMovieId=1)
            assert dropped.value.reason == "not-visible"
            assert dropped.value.details["source"] == stepper.source
        async with aio.Stepper(bus.ingress, "apikey", timeout=T) as stepper:
            with pytest.raises(ValueError):  # the outcome is on events: wait=True needs it
                await stepper.publish("apiKeyIsComplete", wait=True)
    asyncio.run(scenario())


def test_async_stepper_pipelines_steps_each_applied_once_in_order(bus):
    """publish(wait=False) many times, then wait_ack(last): flowd re-publishes each step once, in order."""
    count = 500

    async def scenario():
        async with aio.Events(bus.events, ["step/apikey"], timeout=T) as events, \
                aio.Stepper(bus.ingress, "apikey", timeout=T) as stepper:
            for number in range(count):
                sequence = await stepper.publish("wishlistTab" if number % 2 else "watchedTab", wait=False)
                assert sequence == number + 1
            receipt = await stepper.wait_ack(count)
            assert receipt.ack.acked_sequence == count
            assert not stepper._outbox.ledger.unacked, "every kept step was released by the acks"
            seen = []
            while len(seen) < count:
                message = await events.next(T)
                assert message is not None, f"flowd re-published {len(seen)} of {count} steps"
                if isinstance(message, Step) and message.source == stepper.source:
                    seen.append(message.sequence)
            assert seen == list(range(1, count + 1))
    asyncio.run(scenario())


def test_async_view_snapshot_states_and_refusals(bus):
    async def scenario():
        async with aio.ReactorView(bus.actions, bus.states, "counter", timeout=T) as view:
            snapshot = await view.next_state(T)
            assert snapshot.is_snapshot and snapshot.value == {"isLoading": False, "value": 0}
            receipt = await view.send("increase")
            assert receipt.sequence == 2  # 1 was the snapshotRequest
            values = []
            async for update in view.states(timeout=1):
                values.append((update.value["value"], update.value["isLoading"]))
                if values[-1] == (1, False):
                    break
            assert values == [(0, True), (1, True), (1, False)]
            with pytest.raises(aio.Refused) as refused:
                await view.send("frobnicate")
            assert refused.value.reason == "bad-action"
        async with aio.ReactorView(bus.actions, bus.states, "nosuchreactor", timeout=T) as view:
            with pytest.raises(aio.Refused) as refused:
                await view.next_state(T)
            assert refused.value.reason == "unknown-reactor"
    asyncio.run(scenario())


def test_async_status_and_not_connected(bus, tmp_path):
    async def scenario():
        tree = await aio.status(bus.control, timeout=T)
        assert tree["flows"], "flowd's live navigation tree"
        with pytest.raises(TimeoutError):
            await aio.status(f"ipc://{tmp_path}/nobody.sock", timeout=0.2)
        with pytest.raises(aio.NotConnected):
            async with aio.Events(f"ipc://{tmp_path}/nobody.sock", ["nav/"], timeout=0.2):
                pass
    asyncio.run(scenario())
