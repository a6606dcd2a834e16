"""Signed records: what verifies, what is forged, what a kill may leave."""

from __future__ import annotations

import json

import pytest

from harness import rundir

KEY = "k" * 32


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))


@pytest.mark.parametrize("lines, valid, forged", [
    ([rundir.sign({"a": 1}, KEY), rundir.sign({"a": 2}, KEY)], 2, 0),
    ([rundir.sign({"a": 1}, "other-key")], 0, 1),
    ([json.dumps({"a": 1})], 0, 1),  # no MAC at all, even as the last line
    ([rundir.sign({"a": 1}, KEY).replace('"a":1', '"a":9')], 0, 1),  # edited after signing
    ([rundir.sign({"a": 1}, KEY), rundir.sign({"a": 2}, KEY)[:20]], 1, 0),  # torn by a kill
    ([rundir.sign({"a": 1}, KEY)[:20], rundir.sign({"a": 2}, KEY)], 1, 1),  # torn, but not last
    # killed mid-write, then restarted: the torn line ends attempt 0 (events use "attempt", others "a")
    ([rundir.sign({"attempt": 0, "k": 1}, KEY), rundir.sign({"attempt": 0, "k": 2}, KEY)[:20],
      rundir.sign({"attempt": 1, "k": 1}, KEY)], 2, 0),
    ([rundir.sign({"a": 0}, KEY), rundir.sign({"a": 0}, KEY)[:20], rundir.sign({"a": 1}, KEY)], 2, 0),
    ([rundir.sign({"a": 0}, KEY), "{torn", "{torn", rundir.sign({"a": 1}, KEY)], 2, 1),  # one kill, one torn line
    ([rundir.sign({"a": 1}, KEY), "{torn", rundir.sign({"a": 1}, KEY)], 2, 1),  # same attempt: no kill explains it
    (["{torn", rundir.sign({"a": 1}, KEY)], 1, 1),  # nothing before it
])
def test_read_records(tmp_path, lines, valid, forged):
    write(tmp_path / "x.jsonl", lines)
    recs = rundir.read_records(tmp_path / "x.jsonl", KEY)
    assert (len(recs.valid), recs.forged) == (valid, forged)


def test_writer_lines_are_on_disk_immediately(tmp_path):
    w = rundir.RecordWriter(tmp_path / "r" / "x.jsonl", KEY)
    w.write({"step": 1})
    assert rundir.read_records(tmp_path / "r" / "x.jsonl", KEY).valid == [{"step": 1}]  # before close
    w.close()


def test_atomic_write_leaves_the_old_file_on_failure(tmp_path):
    target = tmp_path / "run.json"
    rundir.atomic_write_json(target, {"v": 1})

    class Boom:
        def __str__(self):
            raise RuntimeError("boom")

    with pytest.raises(TypeError):
        rundir.atomic_write_json(target, {"v": object()})
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temporary left behind


def test_incremental_reader_skips_partial_lines(tmp_path):
    p = tmp_path / "e.jsonl"
    p.write_text('{"a": 1}\n{"a": 2')
    recs, off = rundir.iter_new_lines(p, 0)
    assert recs == [{"a": 1}]
    with open(p, "a") as f:
        f.write("}\n")
    recs, _ = rundir.iter_new_lines(p, off)
    assert recs == [{"a": 2}]


def test_write_many_appends_signed_records_in_order_with_one_write(tmp_path):
    w = rundir.RecordWriter(tmp_path / "r" / "x.jsonl", KEY)
    writes = []
    real = w._append
    w._append = lambda data: writes.append(data) or real(data)
    w.write({"i": 0})
    w.write_many([{"i": 1}, {"i": 2}, {"i": 3}])
    w.write_many([])
    assert len(writes) == 2  # the one record, then the batch of three
    recs = rundir.read_records(tmp_path / "r" / "x.jsonl", KEY)  # on disk at once, as write's are
    assert ([r["i"] for r in recs.valid], recs.forged) == ([0, 1, 2, 3], 0)
    w.close()
    with pytest.raises(ValueError):  # a closed writer says so (the trace's flusher stops on it)
        w.write({"i": 4})
