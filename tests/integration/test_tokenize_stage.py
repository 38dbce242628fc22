"""The tokenize stage and train-tokenizer on real archives, and the loader over what Spark wrote.

One lake per module: the real WARC files (Common Crawl 2020 excerpt, Internet Archive 2008)
ingested, their documents published as clean, tokenized into short sequences (many of them).
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import pytest
from conftest import WRITERS, lake_config, read_lake, read_table, real_file

from pipelines.config import TokenizeConfig
from pipelines.kernels.tokens import count_tokens, load_tokenizer, pack_batches, separator_ids

pytestmark = pytest.mark.slow
SEQ_LEN, GROUPS = 256, 3
SETTINGS = (f"tokenize.seq_len={SEQ_LEN}", f"tokenize.pack_groups={GROUPS}")


def with_inputs(cfg, *names):
    return cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"input": [real_file(n) for n in names]})})


@pytest.fixture(scope="module", params=WRITERS)
def lake(spark, tmp_path_factory, request):
    """Ingest the real archives, publish every document as clean, tokenize; once per writer.

    Dedup and filter are left out: tokenize must conserve whatever silver.documents_clean holds,
    and those two stages would double the fixture's time (the sample-lake run covers the chain).
    """
    from pyspark.sql import functions as F

    from pipelines.runner import run_pipeline
    from pipelines.lake import Lake
    from schemas.catalog import BRONZE_DOCUMENTS, SILVER_DOCUMENTS_CLEAN

    root = tmp_path_factory.mktemp(f"tokenize_lake_{request.param}")
    cfg = with_inputs(lake_config(root, *SETTINGS, writer=request.param), "cc-main-2020-34-excerpt.warc.gz",
                      "ia-heritrix-2008-example.warc.gz")
    run_pipeline(cfg, stages=("ingest",))
    lake = Lake(spark, cfg.lake)
    lake.overwrite(SILVER_DOCUMENTS_CLEAN, lake.read(BRONZE_DOCUMENTS).select(
        "*", F.lit(None).cast("string").alias("language"), F.lit(None).cast("double").alias("language_score")))
    runs = run_pipeline(cfg, stages=("tokenize",))
    return root, runs[-1], cfg


@pytest.fixture(scope="module")
def tables(spark, lake):
    _, _, cfg = lake
    clean = {r.doc_id: r.text for r in read_lake(spark, cfg, "silver.documents_clean").select("doc_id", "text").collect()}
    seqs = [r.asDict() for r in read_lake(spark, cfg, "gold.token_sequences").collect()]
    docs = [r.asDict() for r in read_lake(spark, cfg, "gold.document_tokens").collect()]
    return clean, seqs, docs


def path_mode(cfg) -> None:
    if cfg.lake.mode != "path":
        pytest.skip("loaders and --lake-root read path-mode lakes")


def test_tokens_are_conserved_on_real_data(lake, tables):
    _, tokenize_run, _ = lake
    clean, seqs, docs = tables
    assert len(clean) > 100
    ids = sorted(clean)
    expected = dict(zip(ids, count_tokens([clean[d] for d in ids])))
    packed = sum(s["num_tokens"] for s in seqs)
    # one separator token follows every document in the packed stream
    assert packed == sum(d["num_tokens"] for d in docs) + len(docs) == sum(expected.values()) + len(clean)
    assert {d["doc_id"]: d["num_tokens"] for d in docs} == expected  # and document by document
    notes = tokenize_run.result.notes
    assert (notes["tokens"], notes["document_tokens"], notes["separators"]) == (packed, sum(expected.values()), len(clean))
    assert tokenize_run.result.rows_in == len(clean) and tokenize_run.result.rows_out == len(seqs)


def test_sequences_are_full_except_each_groups_last_and_replay_the_documents(tables):
    clean, seqs, docs = tables
    sep, pad = separator_ids(TokenizeConfig(seq_len=SEQ_LEN))
    tok = load_tokenizer("default")
    by_group = defaultdict(list)
    for s in seqs:
        assert len(s["input_ids"]) == SEQ_LEN + 1
        assert s["seq_id"] == f"{s['pack_group']:05d}-{s['seq_index']:08d}"
        by_group[s["pack_group"]].append(s)
    assert sorted(by_group) == list(range(GROUPS))
    where = {d["doc_id"]: d for d in docs}
    for group, rows in by_group.items():
        rows.sort(key=lambda s: s["seq_index"])
        assert [s["seq_index"] for s in rows] == list(range(len(rows)))
        assert all(s["num_tokens"] == SEQ_LEN + 1 for s in rows[:-1])
        assert all(t == pad for t in rows[-1]["input_ids"][rows[-1]["num_tokens"]:])
        # the group's token stream is its documents in doc_id order, each followed by the separator
        stream = [t for s in rows for t in s["input_ids"][: s["num_tokens"]]]
        members = sorted(d for s in rows for d in s["doc_ids"])
        assert stream == [t for d in members for t in tok.encode(clean[d], add_special_tokens=False).ids + [sep]]
        for s in rows:
            assert len(s["doc_boundaries"]) == len(s["doc_ids"]) == len(s["doc_num_tokens"])
            for offset, doc_id, n in zip(s["doc_boundaries"], s["doc_ids"], s["doc_num_tokens"]):
                start = s["seq_index"] * (SEQ_LEN + 1) + offset
                assert stream[start + n] == sep
                assert (where[doc_id]["seq_id"], where[doc_id]["offset"], where[doc_id]["num_tokens"]) == (s["seq_id"], offset, n)


def test_loader_reads_the_spark_written_table_exactly_once(lake, tables):
    from pipelines.loaders import IGNORE_INDEX, DeltaLoader, TokenSequenceDataset

    root, tokenize_run, cfg = lake
    path_mode(cfg)
    _, seqs, _ = tables
    uri = str(root / "gold" / "token_sequences")
    rows = {s["seq_id"]: s for s in seqs}
    seen = []
    for rank in range(2):
        ds = TokenSequenceDataset(uri, rank=rank, world_size=2, batch_size=3, extra_columns=["seq_id"])
        assert ds.version == tokenize_run.result.output_versions["gold.token_sequences"]
        for batch in DeltaLoader(ds, num_workers=2):
            for k, sid in enumerate(batch["seq_id"]):
                ids, n = rows[sid]["input_ids"], rows[sid]["num_tokens"]
                assert batch["input_ids"][k].tolist() == ids[:-1]
                assert int((batch["labels"][k] != IGNORE_INDEX).sum()) == n - 1
                seen.append(sid)
    assert sorted(seen) == sorted(rows)


def test_train_tokenizer_then_pack_with_it(spark, lake, capsys):
    from pipelines.cli import main

    root, _, cfg = lake
    path_mode(cfg)
    assert main(["train-tokenizer", "--lake-root", str(root), "--vocab-size", "600", "--set",
                 f"lake.writer={cfg.lake.writer}"]) == 0
    path = capsys.readouterr().out.strip().splitlines()[-1]
    run = read_table(spark, root, "ops.runs").filter("stage = 'train_tokenizer'").collect()
    assert len(run) == 1 and run[0].status == "succeeded" and path.endswith(f"/{run[0].run_id}/tokenizer.json")
    assert path.startswith(str(root / "tokenizers"))

    tok = load_tokenizer(path)
    assert 300 < tok.get_vocab_size() <= 600
    assert tok.token_to_id("<|endoftext|>") is not None and tok.token_to_id("<|padding|>") is not None
    texts = [r.text for r in read_table(spark, root, "silver.documents_clean").select("text").collect()]
    encoded = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    assert [tok.decode(ids) for ids in encoded] == texts  # byte-level BPE is lossless
    # merges learned from this corpus: clearly fewer tokens than bytes
    assert sum(map(len, encoded)) < 0.6 * sum(len(t.encode()) for t in texts)

    # packing with it (as the tokenize stage's tasks do, given --set tokenize.tokenizer=<path>)
    clean = read_table(spark, root, "silver.documents_clean").select("doc_id", "text").orderBy("doc_id").collect()
    batch = pa.RecordBatch.from_pylist([{"pack_group": 0, "doc_id": r.doc_id, "text": r.text} for r in clean])
    params = TokenizeConfig(tokenizer=path, seq_len=SEQ_LEN)
    assert separator_ids(params) == (tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|padding|>"))
    seqs = [row for b in pack_batches([batch], params) for row in b.to_pylist()]
    assert {s["tokenizer"] for s in seqs} == {path}
    assert sum(s["num_tokens"] for s in seqs) == sum(map(len, encoded)) + len(texts)


def test_train_tokenizer_on_an_empty_lake_is_a_clear_error(spark, tmp_path, capsys):
    from pipelines.cli import main

    assert main(["train-tokenizer", "--lake-root", str(tmp_path)]) == 2
    assert "silver.documents_clean is empty" in capsys.readouterr().err
    runs = read_table(spark, tmp_path, "ops.runs").collect()
    assert [(r.stage, r.status) for r in runs] == [("train_tokenizer", "failed")]


def test_a_failed_commit_leaves_no_uncommitted_file(spark, lake, tables, monkeypatch):
    """When the second table's commit fails, the first stays committed and the files the tasks
    staged for the second are removed (never referenced by its log, they would stay for good)."""
    import json
    from pathlib import Path

    from pipelines.lake import Lake
    from pipelines.runner import run_pipeline
    from schemas.catalog import GOLD_DOCUMENT_TOKENS

    root, _, cfg = lake
    publish = Lake._publish_files

    def failing(self, spec, *args, **kwargs):
        if spec is GOLD_DOCUMENT_TOKENS:
            raise OSError("disk full")
        return publish(self, spec, *args, **kwargs)

    monkeypatch.setattr(Lake, "_publish_files", failing)
    with pytest.raises(Exception, match="disk full"):   # --full: an unchanged input commits nothing
        run_pipeline(cfg, stages=("tokenize",), full=("tokenize",))
    staging = Path(root) / "_staging"
    assert not staging.exists() or not any(staging.iterdir()), "a staging folder was left behind"
    if cfg.lake.mode == "path":
        for table in ("gold/token_sequences", "gold/document_tokens"):
            folder = Path(root) / table
            added = {json.loads(line)["add"]["path"] for log in (folder / "_delta_log").glob("*.json")
                     for line in log.read_text().splitlines() if '"add"' in line}
            files = {str(p.relative_to(folder)) for p in folder.rglob("*.parquet") if "_delta_log" not in p.parts}
            assert files and files <= added, f"{table}: files no commit names: {sorted(files - added)}"
