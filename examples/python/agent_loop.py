"""An agent loop whose every tool call goes through toolgate.

The "model" here is a script of tool calls (swap in your LLM: anything that
turns the transcript into the next tool call). Two kinds of tools:

  * echo and read_file are toolgate's: toolgate runs them in its worker and
    the loop only waits for the Result (Client.call);
  * write_note and run_command are the agent's own Python functions, put
    behind agent-executed calls with @tg.gate: toolgate decides, the
    function runs on the approved arguments (an approver may have edited
    them), and its return value (or its exception) is reported.

Whatever happens, the model is told in its terms (model_message): a denial
with the approver's reason, an error, an output.

    toolgate dev                      # prints the tokens file; approve in the inbox
    TOOLGATE_TOKEN=$(jq -r .agent .toolgate/tokens.json) python3 agent_loop.py

Each step is printed as one JSON line. Options: --url (TOOLGATE_URL,
default http://127.0.0.1:7700), --token (TOOLGATE_TOKEN), --session,
--notes DIR (where write_note writes), --plan FILE (a JSON list of
{"tool", "args", "call_id"?} to run instead of the built-in one).
"""

import argparse
import json
import os
import shlex
import subprocess
import sys

from toolgate import CallNotOK, Client

DEFAULT_PLAN = [
    {"tool": "echo", "args": {"text": "hello from the agent"}},
    {"tool": "write_note", "args": {"path": "plan.md", "text": "1. read the README\n2. fix the bug\n"}},
    {"tool": "run_command", "args": {"command": "python3 --version"}},
    {"tool": "read_file", "args": {"path": "README.md"}},
]


class ScriptedModel:
    """Stands in for an LLM: returns the plan's next tool call, and reads
    what each call told it (a real model would decide from that)."""

    def __init__(self, plan):
        self.plan = list(plan)
        self.transcript = []

    def next_call(self):
        return self.plan.pop(0) if self.plan else None

    def observe(self, step, message):
        self.transcript.append({"tool": step["tool"], "told": message})


def build_tools(tg, notes_dir):
    """The agent's own tools, each behind an agent-executed call."""

    @tg.gate()
    def write_note(path, text):
        """Write a note under notes_dir (never outside it)."""
        root = os.path.realpath(notes_dir)
        target = os.path.realpath(os.path.join(root, path))
        if os.path.commonpath([root, target]) != root:
            raise ValueError("%s is outside the notes directory" % path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w") as f:
            f.write(text)
        return {"path": os.path.relpath(target, root), "bytes": len(text.encode())}

    @tg.gate()
    def run_command(command):
        """Run a command (no shell); a non-zero exit is the tool's failure."""
        done = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=60, check=True)
        return {"exit": done.returncode, "stdout": done.stdout[-4000:]}

    return {"write_note": write_note, "run_command": run_command}


def run(tg, model, tools, out=sys.stdout):
    """The loop: ask the model for a call, run it through toolgate, tell
    the model what happened. Returns the transcript."""
    while True:
        step = model.next_call()
        if step is None:
            break
        tool, args, call_id = step["tool"], step.get("args") or {}, step.get("call_id")
        line = {"tool": tool, "call_id": call_id}
        if tool in tools:
            line["execution"] = "agent"
            try:
                line["output"] = tools[tool](call_id=call_id, **args)
                line["status"] = "ok"
                message = "%s returned %s" % (tool, json.dumps(line["output"]))
            except CallNotOK as e:
                line.update(status=e.status, reason=e.reason)
                message = e.model_message
        else:
            result = tg.call(tool, args, call_id=call_id)
            line.update(status=result.get("status"), output=result.get("output"), reason=result.get("reason", ""))
            message = result.get("model_message") or json.dumps(result.get("output"))
        line["model_message"] = message
        model.observe(step, message)
        print(json.dumps(line), file=out, flush=True)
    return model.transcript


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=os.environ.get("TOOLGATE_URL", "http://127.0.0.1:7700"))
    ap.add_argument("--token", default=os.environ.get("TOOLGATE_TOKEN", ""))
    ap.add_argument("--session", default="py-agent")
    ap.add_argument("--notes", default="notes")
    ap.add_argument("--plan", help="a JSON file: a list of {tool, args, call_id?}")
    opts = ap.parse_args(argv)
    if not opts.token:
        ap.error("an agent token is needed: --token or TOOLGATE_TOKEN")
    plan = DEFAULT_PLAN
    if opts.plan:
        with open(opts.plan) as f:
            plan = json.load(f)
    tg = Client(opts.url, opts.token, opts.session)
    transcript = run(tg, ScriptedModel(plan), build_tools(tg, opts.notes))
    print(json.dumps({"done": True, "transcript": transcript}), flush=True)


if __name__ == "__main__":
    main()
