"""A real-text corpus for the studies: Jane Austen's six novels, from Debian's package
`r-cran-janeaustenr` (MIT; the novels themselves are in the public domain).

`obtain` fetches the package with `apt-get download` (Debian's registry, which this
project already installs from), unpacks it with `dpkg-deb -x` and reads the novels from
the R lazy-load database inside (albert_tf/data/r_lazyload.py); the sha256 of the .deb
and of the database files are returned so the exact bytes are on record.

`split_novel` turns a novel's lines (as the package stores them: the Project Gutenberg
text, wrapped at about 70 characters) into chapters of paragraphs of sentences, and
`write_corpus` writes them in the pretraining input format (one sentence per line, a
blank line between documents; a document is a chapter). Chapters are dealt to three
parts by their position in their novel (`chapter_part`): of every ten chapters, the
fifth is held out for the fine-tuning tasks' training sets, the tenth for their dev
and test sets and the masked-LM held-out data; pretraining sees the other eight, so no
sentence a task is built from was pretrained on.

`own_text_parts` does the same for a user's own text (`--text_file`): files in the
pretraining input format, each document dealt by its position in its file as a chapter
is, and read as one paragraph; only the tasks that need no labels from a source
(next sentence, word order) are built from it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tempfile

from albert_tf import fileio
from albert_tf.data import r_lazyload
from albert_tf.errors import UserError
from albert_tf.options import REQUIRED, Options, check, option

PACKAGE = "r-cran-janeaustenr"
DATABASE = "usr/lib/R/site-library/janeaustenr/data/Rdata"  # .rdx and .rdb, in the .deb
COPYRIGHT = "usr/share/doc/r-cran-janeaustenr/copyright"
# Object name in the package -> the novel's title.
NOVELS = {
    "sensesensibility": "Sense and Sensibility",
    "prideprejudice": "Pride and Prejudice",
    "mansfieldpark": "Mansfield Park",
    "emma": "Emma",
    "northangerabbey": "Northanger Abbey",
    "persuasion": "Persuasion",
}
PARTS = ("pretrain", "task_train", "task_dev")

_CHAPTER = re.compile(r"^\s*chapter\s+([ivxlc]+|\d+)\b", re.IGNORECASE)
_END = re.compile(r"^\s*(the end|finis)\s*$", re.IGNORECASE)
# A sentence ends at . ! or ? (and any closing quotes or brackets) followed by space and
# an opening quote, bracket or capital letter; not after the titles Austen abbreviates.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'’”)_]*\s+(?=[\"'‘“(_]*[A-Z])")
_ABBREVIATION = re.compile(r"\b(Mr|Mrs|Dr|St|Col|Capt|Gen|Adm|Rev|Esq|Sir)\.$")


def chapter_part(index: int) -> str:
    """The part (PARTS) that a novel's chapter with 0-based `index` goes to."""
    return {4: "task_train", 9: "task_dev"}.get(index % 10, "pretrain")


def sentences(paragraph: str) -> list[str]:
    """The sentences of one paragraph (whitespace already single spaces)."""
    out, start = [], 0
    for match in _SENTENCE_END.finditer(paragraph):
        if _ABBREVIATION.search(paragraph[start : match.start()]):
            continue
        out.append(paragraph[start : match.start() + len(match.group().rstrip())].strip())
        start = match.end()
    tail = paragraph[start:].strip()
    return out + [tail] if tail else out


def split_novel(lines: list[str]) -> list[list[list[str]]]:
    """chapters -> paragraphs -> sentences of a novel's lines. The front matter before
    the first chapter heading and everything from "THE END" / "Finis" on are dropped;
    chapter headings are not text."""
    chapters, paragraph = [], []

    def end_paragraph():
        if paragraph and chapters:
            text = " ".join(" ".join(paragraph).split())
            chapters[-1].append(sentences(text))
        paragraph.clear()

    for line in lines:
        line = line or ""
        if _CHAPTER.match(line):
            end_paragraph()
            chapters.append([])
        elif _END.match(line):
            break
        elif not line.strip():
            end_paragraph()
        else:
            paragraph.append(line.strip())
    end_paragraph()
    return [c for c in chapters if c]


def parts(novels: dict[str, list[str]]) -> dict[str, list[tuple[str, int, list]]]:
    """part -> [(novel title, chapter index, paragraphs of sentences)], in novel order
    (NOVELS) and chapter order."""
    out = {p: [] for p in PARTS}
    for key, title in NOVELS.items():
        if key not in novels:
            raise ValueError(f"novel {key!r} missing from the package's data")
        for index, chapter in enumerate(split_novel(novels[key])):
            out[chapter_part(index)].append((title, index, chapter))
    return out


def corpus_text(chapters) -> str:
    """The pretraining input format: one sentence per line, a blank line between
    documents (chapters)."""
    return "\n".join(
        "\n".join(s for paragraph in chapter for s in paragraph) + "\n"
        for _, _, chapter in chapters
    )


def text_documents(text: str) -> list[list[str]]:
    """The documents of a text in the pretraining input format (one sentence a line, a
    blank line between documents): [[sentence]], whitespace made single spaces."""
    documents = [[]]
    for line in text.splitlines():
        line = " ".join(line.split())
        if line:
            documents[-1].append(line)
        elif documents[-1]:
            documents.append([])
    return [d for d in documents if d]


def own_text_parts(patterns) -> tuple[dict, dict]:
    """(parts as `parts` returns them, source) of a user's text files (globs, in the
    pretraining input format): part -> [(file name, document index, [document's
    sentences])], each file's documents dealt by `chapter_part`; source: the files and
    the sha256 of their bytes. UserError naming --text_file when a pattern matches no
    file, or a file is not UTF-8 text or has fewer than 10 documents (its fifth and
    tenth build the tasks)."""
    paths = []
    for pattern in patterns:
        found = sorted(fileio.glob(pattern)) if any(c in pattern for c in "*?[") else [pattern]
        if not found:
            raise UserError(f"--text_file={pattern}: no file matches")
        paths += found
    out, sha256 = {p: [] for p in PARTS}, {}
    for path in paths:
        fileio.check_input_file(path, f"--text_file={path}")
        data = fileio.read_bytes(path)
        try:
            documents = text_documents(data.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise UserError(f"--text_file={path}: not UTF-8 text (byte {err.start})") from None
        if len(documents) < 10:
            raise UserError(
                f"--text_file={path}: {len(documents)} documents; expected at least 10 "
                "(a blank line between documents, one sentence a line)"
            )
        name = os.path.basename(path)
        for index, document in enumerate(documents):
            out[chapter_part(index)].append((name, index, [document]))
        sha256[path] = _sha256(data)
    source = {"files": paths, "license": "the user's", "sha256": sha256}
    return out, source


def train_spm(text: str, vocab_size: int, seed: int) -> bytes:
    """A SentencePiece unigram model (its serialized proto) of `text` lower-cased as the
    tokenizer sees it (preprocess_text(lower=True): use do_lower_case=True), with the
    original's spm_train options (ids 0-4 <pad> <unk> [CLS] [SEP] [MASK]). One thread and
    a fixed seed make it byte-identical run to run."""
    import sentencepiece as spm

    from albert_tf.data.tokenization import preprocess_text

    lines = [preprocess_text(line, lower=True) for line in text.splitlines() if line.strip()]
    spm.set_random_generator_seed(seed)
    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=writer,
        vocab_size=vocab_size,
        pad_id=0,
        unk_id=1,
        eos_id=-1,
        bos_id=-1,
        control_symbols=["[CLS]", "[SEP]", "[MASK]"],
        shuffle_input_sentence=True,
        input_sentence_size=10000000,
        character_coverage=0.99995,
        model_type="unigram",
        num_threads=1,
        minloglevel=2,
    )
    return writer.getvalue()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def obtain(work_dir: str) -> tuple[dict, dict]:
    """Downloads and unpacks the package in `work_dir` (a machine-local folder). Returns
    (novels: object name -> lines, source: package, version, file names, sha256s and the
    package's copyright text). UserError when the download or unpacking fails."""
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise UserError(f"{tool} not found: the corpus comes from Debian's {PACKAGE}")
    download = subprocess.run(
        ["apt-get", "download", PACKAGE], cwd=work_dir, capture_output=True, text=True
    )
    debs = [f for f in os.listdir(work_dir) if f.endswith(".deb")]  # machine-local
    if download.returncode != 0 or len(debs) != 1:
        reason = (download.stderr.strip().splitlines() or ["no .deb written"])[-1]
        raise UserError(
            f"apt-get download {PACKAGE} failed ({reason}); it needs Debian's package "
            "index (`apt-get update`) and the network"
        )
    deb = os.path.join(work_dir, debs[0])
    unpacked = os.path.join(work_dir, "unpacked")
    subprocess.run(["dpkg-deb", "-x", deb, unpacked], check=True, capture_output=True)
    files = {}
    for suffix in (".rdx", ".rdb"):
        with open(os.path.join(unpacked, DATABASE + suffix), "rb") as f:  # machine-local
            files[suffix] = f.read()
    with open(deb, "rb") as f:  # machine-local
        deb_bytes = f.read()
    with open(os.path.join(unpacked, COPYRIGHT), encoding="utf-8") as f:  # machine-local
        copyright_text = f.read()
    source = {
        "package": PACKAGE,
        "registry": "Debian (apt-get download)",
        "deb": debs[0],
        "license": "MIT (the package); the novels (1811-1818) are in the public domain",
        "sha256": {
            debs[0]: _sha256(deb_bytes),
            DATABASE + ".rdx": _sha256(files[".rdx"]),
            DATABASE + ".rdb": _sha256(files[".rdb"]),
        },
        "copyright": copyright_text,
    }
    return r_lazyload.read_lazyload(files[".rdx"], files[".rdb"]), source


def write_corpus(
    output_dir: str, split: dict, source: dict, vocab_size: int = 5000, seed: int = 12345
) -> dict:
    """Writes corpus/{pretrain,task_train,task_dev}.txt of `split` (as `parts` returns
    it), spm.model (trained on the pretraining part) and source.json under `output_dir`;
    returns a summary (chapters, sentences and bytes per part)."""
    summary = {}
    for part, chapters in split.items():
        text = corpus_text(chapters)
        fileio.atomic_write_text(os.path.join(output_dir, "corpus", f"{part}.txt"), text)
        if part == "pretrain":
            try:
                model = train_spm(text, vocab_size, seed)
            except RuntimeError as err:  # SentencePiece: too few pieces for the size asked
                raise UserError(f"--vocab_size={vocab_size}: {str(err).strip()}") from None
            fileio.atomic_write_bytes(os.path.join(output_dir, "spm.model"), model)
        summary[part] = {
            "chapters": len(chapters),
            "sentences": sum(len(p) for _, _, c in chapters for p in c),
            "bytes": len(text.encode("utf-8")),
        }
    fileio.atomic_write_text(
        os.path.join(output_dir, "source.json"),
        json.dumps({**source, "parts": summary}, indent=2) + "\n",
    )
    return summary


def fetch_novels(expected_sha256: str | None) -> tuple[dict, dict]:
    """`obtain` in a temporary folder that is removed afterwards; UserError when the
    database's sha256 (.rdb) is not `expected_sha256` (None: any)."""
    with tempfile.TemporaryDirectory(prefix="real_text_") as work_dir:  # machine-local
        novels, source = obtain(work_dir)
    got = source["sha256"][DATABASE + ".rdb"]
    if expected_sha256 and got != expected_sha256:
        raise UserError(
            f"--expected_sha256: the package's {DATABASE}.rdb has sha256 {got}, expected "
            f"{expected_sha256} (another version of {PACKAGE}?); pass --expected_sha256= "
            "to accept it"
        )
    return novels, source


# The .rdb of r-cran-janeaustenr 1.0.0-1 (Debian 12 and 13), the bytes our numbers were
# measured on (data/real_text/SOURCE.md).
RDB_SHA256 = "8fb5198960d0da724b1562f96e4221e5c1b41ff455000280b02c55980c3d8f21"


@dataclasses.dataclass(kw_only=True)
class RealTextOptions(Options):
    """What data/get_real_text.py's flags decide (each field is also the flag)."""

    output_dir: str = option(REQUIRED, "The corpus, spm.model and tasks go here.", output="folder")
    text_file: tuple[str, ...] = option(
        (),
        "Your own text instead of the novels: files or globs in the pretraining input "
        "format (one sentence a line, a blank line between documents), at least 10 "
        "documents each; builds the tasks that need no labels (MRPC, CoLA formats).",
    )
    expected_sha256: str = option(
        RDB_SHA256, "sha256 of the package's Rdata.rdb (empty: accept any version)."
    )
    vocab_size: int = option(5000, "SentencePiece vocabulary size.", minimum=100)
    seed: int = option(12345, "Seed of the SentencePiece model and the tasks' sampling.")
    train_examples: int = option(
        1000, "Training examples per task at most (the low-data setting).", minimum=2
    )
    dev_examples: int = option(
        1000, "Held-out examples per task at most, half dev and half test.", minimum=4
    )


def build(o: RealTextOptions) -> dict:
    """Fetches the novels (or reads --text_file) and writes the corpus, spm.model,
    source.json and the GLUE-format tasks (glue/SST-2, glue/MRPC, glue/CoLA; no SST-2 from
    --text_file) under --output_dir; returns what was written."""
    from albert_tf.research import real_text_tasks

    check(o)
    if o.text_file:
        split, source = own_text_parts(o.text_file)
        names = real_text_tasks.UNLABELLED_TASKS
    else:
        novels, source = fetch_novels(o.expected_sha256 or None)
        split, names = parts(novels), tuple(real_text_tasks.TASKS)
    summary = write_corpus(
        o.output_dir, split, {**source, "tasks": list(names)}, o.vocab_size, o.seed
    )
    tasks = real_text_tasks.write_tasks(
        os.path.join(o.output_dir, "glue"),
        split,
        o.seed,
        o.train_examples,
        o.dev_examples,
        tasks=names,
    )
    return {"corpus": summary, "tasks": tasks, "sha256": source["sha256"]}


__all__ = [
    "NOVELS",
    "PARTS",
    "chapter_part",
    "sentences",
    "split_novel",
    "parts",
    "corpus_text",
    "text_documents",
    "own_text_parts",
    "train_spm",
    "obtain",
    "write_corpus",
    "fetch_novels",
    "RDB_SHA256",
    "RealTextOptions",
    "build",
]
