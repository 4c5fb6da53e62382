"""Big corpora: many files through the data module, the progress line, data.max_mib's meaning
(a cap on what is held in memory) and bench/bench_data.py's arithmetic."""

import sys

import pytest
from conftest import ROOT

from tinylm.errors import TinyLMError
from tinylm.tasks.text import corpus, token_cache
from tinylm.tasks.text.corpus import SEPARATOR, Corpus
from tinylm.tasks.text.data import TextDataModule
from tinylm.tokenizer import CharTokenizer

sys.path.insert(0, str(ROOT / "bench"))

import bench_data  # noqa: E402

BOOKS = {"02-xiyouji.txt": "话说海外有一国土，名曰傲来国。\n" * 30,
         "01-hongloumeng.txt": "\ufeff列位看官：你道此书从何而来？\r\n" * 30,
         "10-shuihu.txt": "话说大宋仁宗天子在位。" * 30}


def prepared(path, **kw):
    dm = TextDataModule(path=str(path), **{"block_size": 16, "batch_size": 4, "val_batches": 2, **kw})
    dm.prepare()
    return dm


@pytest.fixture
def books(tmp_path):
    folder = tmp_path / "books"
    folder.mkdir()
    for name, text in BOOKS.items():
        (folder / name).write_text(text, encoding="utf-8", newline="")
    (folder / "notes.md").write_text("not a book")
    return folder


@pytest.mark.parametrize("pattern", ["", "*.txt", "0*.txt"])
def test_a_folder_or_glob_trains_on_the_joined_files_in_sorted_order(books, pattern, tmp_path, monkeypatch):
    names = sorted(n for n in BOOKS if pattern != "0*.txt" or n.startswith("0"))
    text = SEPARATOR.join(BOOKS[n].removeprefix("\ufeff").replace("\r\n", "\n") for n in names)
    monkeypatch.setattr(token_cache, "CACHE_MIN_MIB", 0)
    for cache_dir in (None, str(tmp_path / "cache")):
        dm = prepared(books / pattern, cache_dir=cache_dir, val_fraction=0.2)
        tokenizer = CharTokenizer.from_text(text)
        n_val = int(len(text) * 0.2)
        assert dm.tokenizer.itos == tokenizer.itos
        assert dm.train_ids.tolist() == tokenizer.encode(text[: len(text) - n_val])  # validation: the end
        assert dm.val_ids.tolist() == tokenizer.encode(text[len(text) - n_val :])
        assert "".join(dm.read_split()) == text  # what evaluate.py scores


def test_a_large_text_shows_a_progress_line_with_size_and_rate(tmp_path, monkeypatch, capsys):
    path = tmp_path / "t.txt"
    path.write_text("注意力" * 100_000, encoding="utf-8")
    monkeypatch.setattr(corpus, "PROGRESS_MIN_BYTES", 0)
    list(Corpus(path, chunk_bytes=1 << 16).texts(progress="tokenizing t.txt"))
    err = capsys.readouterr().err
    assert "tokenizing t.txt: 1 of 1 MiB (" in err and err.endswith(" MiB/s)\n")
    monkeypatch.setattr(corpus, "PROGRESS_MIN_BYTES", 2 << 20)  # the default is 64 MiB
    list(Corpus(path).texts(progress="tokenizing t.txt"))
    assert capsys.readouterr().err == ""


def test_max_mib_caps_what_is_held_in_memory_not_a_cached_text(tmp_path, monkeypatch):
    path = tmp_path / "t.txt"
    path.write_text("自注意力可以让序列中的每个位置看到前面的所有位置。\n" * 30_000, encoding="utf-8")  # 2.2 MiB
    with pytest.raises(TinyLMError, match=r"is 2\.2 MiB, over the 1 MiB limit: raise it with data.max_mib=N"):
        prepared(path, max_mib=1)
    with pytest.raises(TinyLMError, match="data.repeat=3 makes 7 MiB of text from .*, over the data.max_mib=4 "
                                          "limit: use data.repeat=1 or less, or raise data.max_mib"):
        prepared(path, max_mib=4, repeat=3)
    monkeypatch.setattr(token_cache, "CACHE_MIN_MIB", 2)
    cached = prepared(path, max_mib=1, repeat=3, cache_dir=str(tmp_path / "cache"))  # streamed: no cap
    assert cached.cache_folder is not None and len(cached.train_ids) + len(cached.val_ids) == 3 * 30_000 * 26
    assert prepared(path, max_mib=1, cache_dir=str(tmp_path / "cache")).cache_folder is not None


def test_bench_targets_compare_each_figure_with_its_target():
    rows = [{"what": "prepare", "cache": "cold", "size_mb": 10, "seconds": 0.2},
            {"what": "prepare", "cache": "cold", "size_mb": 100, "seconds": 1.2},
            {"what": "prepare", "cache": "warm", "size_mb": 100, "seconds": 0.5},
            {"what": "first step", "cache": "warm", "size_mb": 1000, "peak_rss_mib": 650.0}]
    lines = list(bench_data.target_lines(rows))
    assert [(line["target"], line.get("met")) for line in lines] == [
        ("prepare cold 100 MB seconds <= 1.5", True), ("prepare warm 100 MB seconds <= 0.3", False),
        ("first step warm 1000 MB peak_rss_mib <= 700", True), ("prepare cold grows linearly", None)]
    assert lines[-1]["seconds_per_100mb"] == {10: 2.0, 100: 1.2}


def test_bench_texts_are_whole_copies_of_the_source(tmp_path):
    source = tmp_path / "s.txt"
    source.write_text("红楼梦" * 1000, encoding="utf-8")  # 9,000 bytes
    assert bench_data.make_text(tmp_path, 1, source).read_bytes() == source.read_bytes() * 111
