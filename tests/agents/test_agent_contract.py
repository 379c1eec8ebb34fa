"""The agent contract (references/agents.md): how a rollout's failure is classed, from the agent's own word."""

from __future__ import annotations

from agentic_rl.launch import rehearsal


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


def test_a_judge_with_a_trajectory_parameter_reads_every_turn(tmp_path):
    from agentic_rl.agents import kit

    (tmp_path / "judge.py").write_text(
        "def compute_reward(response, ground_truth, metadata, trajectory=None):\n"
        "    used = [m['tool_calls'][0]['function']['name'] for m in trajectory or [] if m.get('tool_calls')]\n"
        "    return float(used == ['calculator'] and response == ground_truth)\n")
    trajectory = [{"role": "user", "content": "2+3?"},
                  {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {
                      "name": "calculator", "arguments": "{\"expression\": \"2+3\"}"}}]},
                  {"role": "tool", "tool_call_id": "c", "content": "5"}, {"role": "assistant", "content": "5"}]
    assert kit.score(str(tmp_path), "5", {"ground_truth": "5"}, trajectory) == (1.0, None)
    assert kit.score(str(tmp_path), "5", {"ground_truth": "5"}, trajectory[:1] + trajectory[3:]) == (0.0, None)
    (tmp_path / "judge.py").write_text("def compute_reward(response, ground_truth, metadata):\n    return 1.0\n")
    assert kit.score(str(tmp_path), "5", {"ground_truth": "5"}, trajectory) == (1.0, None)  # a 3-argument judge too


def tool_sample(rollout_id: str, tool_errors: int, max_hit: bool = False) -> dict:
    from agentic_rl.runs import samples

    request = {"messages": [
        {"role": "system", "content": "Use the calculator."}, {"role": "user", "content": f"Q {rollout_id}"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "calculator", "arguments": "{\"expression\": \"1+1\"}"}},
            {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": "{\"expression\": \"2*2\"}"}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "2"}, {"role": "tool", "tool_call_id": "c1", "content": "4"}]}
    response = {"choices": [{"message": {"role": "assistant", "content": "Answer: 4"}, "finish_reason": "stop"}]}
    events = [{"event_type": "model_request", "data": {"request": {"messages": request["messages"][:2]}}},
              {"event_type": "model_request", "data": {"request": request, "response": response}},
              {"event_type": "reward", "data": {"value": 1.0, "tool_calls": 2, "tool_errors": tool_errors,
                                                "max_turns_hit": max_hit}}]
    return samples.from_events(events, run_id="r", rollout_id=rollout_id, split="val", step=0, row_id=rollout_id,
                               state="succeeded")


def test_a_multi_turn_sample_keeps_every_turn_and_its_counts():
    s = tool_sample("a", 1)
    assert s["prompt"] == "[system] Use the calculator.\n[user] Q a"
    assert (s["model_calls"], s["tool_calls"], s["turns"], s["tool_errors"]) == (2, 2, 2, 1)
    assert s["trajectory"][0] == {"role": "assistant", "content": None, "tool_calls": [
        {"name": "calculator", "arguments": "{\"expression\": \"1+1\"}"},
        {"name": "calculator", "arguments": "{\"expression\": \"2*2\"}"}]}
    assert [t["role"] for t in s["trajectory"]] == ["assistant", "tool", "tool", "assistant"]
    assert s["response"] == "Answer: 4" and s["max_turns_hit"] is False


def test_a_long_trajectory_is_cut_to_fit_a_sample_line():
    from agentic_rl.runs import samples

    turns = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": "search", "arguments": "x" * 5000}}]}
        if i % 2 == 0 else {"role": "tool", "content": "y" * 5000} for i in range(60)]
    events = [{"event_type": "model_request", "data": {"request": {"messages": [{"role": "user", "content": "q"}, *turns]},
                                                       "response": {"choices": [{"message": {"content": "done"}}]}}}]
    s = samples.from_events(events, run_id="r", rollout_id="x", split="val", step=0, row_id=1, state="succeeded")
    assert len(samples.encode(s)) <= samples.LINE_MAX_BYTES and s["turns_cut"] > 0
    assert s["trajectory"][-1]["content"] == "done"


def test_agent_flags_from_samples_and_metrics():
    from agentic_rl.runs import run_health

    window = [tool_sample(f"s{i}", 1 if i < 3 else 0, max_hit=i < 2) for i in range(10)]
    flags = {f["flag"]: f for f in run_health.sample_flags(window)}
    assert flags["tool_errors"]["value"] == 0.15 and "3 of 20 recent tool calls failed" in flags["tool_errors"]["message"]
    assert flags["max_turns_hit"]["value"] == 0.2
    from agentic_rl.runs import sample_reader

    assert sample_reader.marks(window[0]) == ["tool_errors", "max_turns_hit"]
    history = [{"step": 1, "data": {run_health.MERGE_MISMATCH: 0}}, {"step": 2, "data": {run_health.MERGE_MISMATCH: 3}}]
    found = [f for f in run_health.flags(history) if f["flag"] == "trace_merge_mismatch"]
    assert found and found[0]["step"] == 2 and found[0]["value"] == 3 and "<think>" in found[0]["hint"]
    assert not [f for f in run_health.flags(history[:1]) if f["flag"] == "trace_merge_mismatch"]


def test_a_sample_with_a_hostile_trajectory_is_skipped(tmp_path):
    from agentic_rl.runs import sample_reader, samples

    good = tool_sample("g", 0)
    bad = {**tool_sample("b", 0), "trajectory": [{"role": "assistant", "tool_calls": "calculator"}]}
    (tmp_path / samples.DIR).mkdir()
    (tmp_path / samples.DIR / samples.VAL).write_bytes(samples.encode(good) + samples.encode(bad))
    assert [s["rollout_id"] for s in sample_reader.read(tmp_path)] == ["g"]
