"""docs/policy-examples/vram-notice-webhook: what it posts is text for a chat, where a process or
user name is someone else's words: `<!channel>` (Slack) or `@channel` (Mattermost, Rocket.Chat)
in a process name must not ping everyone, and Slack's control characters &, <, > are escaped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "docs" / "policy-examples" / "vram-notice-webhook"


def post(tmp_path: Path, user: str, name: str) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    got = tmp_path / "posted.json"
    (bin_dir / "curl").write_text(f"#!{sys.executable}\nimport sys\nopen({str(got)!r}, 'w').write(sys.stdin.read())\n")
    (bin_dir / "curl").chmod(0o755)
    url = tmp_path / "webhook-url"
    url.write_text("https://hooks.example.com/T0/B0/xyz\n")
    facts = {"rule": "idle-big", "host": "gpu7", "user": user, "uid": 1001, "pid": 5001, "name": name, "gpu": 4,
             "memory_bytes": 18 * 2**30, "idle_seconds": 7260.0, "reclaim": {"scheduled": False, "at": None}}
    done = subprocess.run([str(SCRIPT), str(url)], input=json.dumps(facts).encode(), capture_output=True, timeout=30,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    payload: dict = json.loads(got.read_text())
    assert payload["vram"] == facts  # the facts themselves go unchanged, as data
    return payload


def test_slack_control_sequences_in_a_process_name_are_escaped(tmp_path):
    text = post(tmp_path, "bob", "<!channel> & <https://evil.example|click>")["text"]
    assert "<" not in text and ">" not in text
    assert "(&lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;)" in text


def test_at_mentions_in_names_do_not_mention(tmp_path):
    text = post(tmp_path, "@here", "@channel @all")["text"]
    for word in ("@here", "@channel", "@all"):
        assert word not in text
    assert text.startswith("gpu7: @\u2060here's process 5001 (@\u2060channel @\u2060all)")
