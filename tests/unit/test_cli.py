from pipelines.cli import expand_full, expand_multi_value, main


def test_input_takes_several_values():
    assert expand_multi_value(["run", "--input", "a.warc.gz", "b.warc.gz", "--lake-root", "x", "-i", "c"]) == [
        "run", "--input", "a.warc.gz", "--input", "b.warc.gz", "--lake-root", "x", "--input", "c"]


def test_missing_input_is_a_clear_error_before_spark(tmp_path, capsys):
    code = main(["run", "--input", str(tmp_path / "nope.warc.gz"), "--lake-root", str(tmp_path / "lake")])
    assert code == 2 and "ingest input not found" in capsys.readouterr().err
    assert not (tmp_path / "lake").exists()


def test_bad_config_and_unknown_stage_exit_2(tmp_path, capsys):
    assert main(["run", "--set", "dedup.treshold=0.5"]) == 2
    assert "dedup.treshold" in capsys.readouterr().err
    assert main(["run", "--stages", "compress", "--lake-root", str(tmp_path)]) == 2
    assert "unknown stage" in capsys.readouterr().err


def test_full_takes_stage_names_or_none():
    assert expand_full(["run", "--full"]) == ["run", "--full", "all"]
    assert expand_full(["run", "--full", "--lake-root", "x"]) == ["run", "--full", "all", "--lake-root", "x"]
    assert expand_full(["run", "--full", "filter", "tokenize", "-s", "filter"]) == [
        "run", "--full", "filter", "--full", "tokenize", "-s", "filter"]
    assert expand_full(["report", "--full"]) == ["report", "--full"]


def test_full_names_an_unknown_stage_exit_2(tmp_path, capsys):
    assert main(["run", "--full", "compress", "--stages", "filter", "--lake-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--full: unknown stage(s) compress" in err
    assert not any(tmp_path.iterdir())   # before Spark started
