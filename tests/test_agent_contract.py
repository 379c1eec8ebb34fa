"""The agent contract (references/agents.md): how a rollout's failure is classed, from the agent's own word."""

from __future__ import annotations

from agentic_rl import rehearsal


def reward(**data):
    return {"event_type": "reward", "data": data}


def test_a_custom_agents_model_call_failed_reason_is_the_agents_failure_not_the_endpoints():
    # issue 18 E.23: the reason's text is the agent's prose; only its `failure` kind classes it.
    reason, endpoint = rehearsal.failure_reason([reward(value=0.0, reason="model call failed: my parser broke")], None)
    assert reason.startswith("model call failed") and endpoint is False
    _, endpoint = rehearsal.failure_reason([reward(value=0.0, reason="timeout", failure="model_endpoint")], None)
    assert endpoint is True
    # the gateway's own record of an HTTP error from the model still counts, whatever the agent said
    events = [{"event_type": "model_request", "data": {"http_status": 502}}]
    assert rehearsal.failure_reason(events, "exit 1") == ("model call failed: HTTP 502 from the model endpoint", True)
