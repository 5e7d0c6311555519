import json
import os

from hicache_mooncake.tools.results_json import portable, write_json


def test_machine_paths_become_relative(tmp_path, monkeypatch):
    repo = tmp_path / "main"
    repo.mkdir()
    monkeypatch.chdir(repo)
    data = {
        "dir": str(repo / "build"),
        "trace": str(tmp_path / "shared" / "t.jsonl"),
        "reason": f"{repo}/build/x: O_DIRECT accepted",
        "nested": [str(repo / ".venv" / "bin" / "python3"), 3, None],
        "other": "/usr/bin/fio",
    }
    out = portable(data)
    assert out["dir"] == "build"
    assert out["trace"] == os.path.join("..", "shared", "t.jsonl")
    assert out["reason"] == "build/x: O_DIRECT accepted"
    assert out["nested"] == [os.path.join(".venv", "bin", "python3"), 3, None]
    assert out["other"] == "/usr/bin/fio"
    write_json(repo / "r.json", data)
    assert str(tmp_path) not in (repo / "r.json").read_text()
    assert json.loads((repo / "r.json").read_text())["dir"] == "build"
