"""A WordPiece tokenizer (BERT's, uncased), read from a ``vocab.txt``: what turns a sentence into
the token ids of all-MiniLM-L6-v2 (``course_utils.minilm.load_tokenizer``), written here so that
the course needs neither ``tokenizers`` nor ``transformers``.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import torch

MAX_SEQ_LENGTH = 256  # sentence-transformers truncates all-MiniLM-L6-v2's inputs here


def _is_whitespace(ch: str) -> bool:
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def _is_control(ch: str) -> bool:
    return ch not in "\t\n\r" and unicodedata.category(ch).startswith("C")


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)  # BERT counts every non-alphanumeric ASCII symbol ($, +, ^, `) as punctuation
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


class WordPieceTokenizer:
    """BERT's uncased tokenizer: basic tokenisation, then greedy longest-match-first word pieces.

    Basic tokenisation: drop control characters, lower-case, strip accents (NFD, then drop the
    combining marks), put spaces around CJK characters, split on whitespace and then around
    every punctuation character. Word pieces: the longest prefix of the word that is in the
    vocabulary, then the longest ``##``-continuation of the rest, and so on; a word that cannot
    be covered (or is over 100 characters) becomes ``[UNK]``. Special tokens written in the
    text (``"[SEP]"``, ``"[MASK]"``, upper case) are kept whole, as Hugging Face's tokenizers do.
    """

    SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

    def __init__(self, vocab: list[str], max_chars_per_word: int = 100):
        self.vocab = vocab
        self.index = {token: i for i, token in enumerate(vocab)}
        self.max_chars_per_word = max_chars_per_word
        self.pad_id, self.unk_id = self.index["[PAD]"], self.index["[UNK]"]
        self.cls_id, self.sep_id = self.index["[CLS]"], self.index["[SEP]"]

    @classmethod
    def from_file(cls, path) -> "WordPieceTokenizer":
        return cls(Path(path).read_text(encoding="utf-8").splitlines())

    def basic_tokenize(self, text: str) -> list[str]:
        """Text -> words and punctuation marks, lower-cased and without accents."""
        cleaned = []
        for ch in text:
            if ch in ("\x00", "\ufffd") or _is_control(ch):
                continue
            if _is_cjk(ord(ch)):
                cleaned.append(f" {ch} ")
            else:
                cleaned.append(" " if _is_whitespace(ch) else ch)
        words = []
        for word in "".join(cleaned).split():
            word = unicodedata.normalize("NFD", word.lower())
            word = "".join(ch for ch in word if unicodedata.category(ch) != "Mn")
            current = ""
            for ch in word:
                if _is_punctuation(ch):
                    if current:
                        words.append(current)
                    words.append(ch)
                    current = ""
                else:
                    current += ch
            if current:
                words.append(current)
        return words

    def wordpiece(self, word: str) -> list[str]:
        """One word -> its pieces, e.g. "unaffable" -> ["una", "##ffa", "##ble"]."""
        if len(word) > self.max_chars_per_word:
            return ["[UNK]"]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:  # the longest piece that the vocabulary knows
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.index:
                    break
                end -= 1
            if end == start:  # not even one character matched: the whole word is unknown
                return ["[UNK]"]
            pieces.append(piece)
            start = end
        return pieces

    def tokenize(self, text: str) -> list[str]:
        """Text -> word pieces, without the [CLS]/[SEP] that ``encode`` adds."""
        pieces = []
        for part in re.split("(" + "|".join(map(re.escape, self.SPECIAL)) + ")", text):
            if part in self.SPECIAL:
                pieces.append(part)
            else:
                pieces += [p for word in self.basic_tokenize(part) for p in self.wordpiece(word)]
        return pieces

    def encode(self, text: str, max_length: int = MAX_SEQ_LENGTH) -> list[int]:
        """Text -> ids of [CLS] pieces... [SEP], cut to ``max_length`` ids in all."""
        ids = [self.index.get(piece, self.unk_id) for piece in self.tokenize(text)]
        return [self.cls_id] + ids[: max_length - 2] + [self.sep_id]

    def __call__(self, texts, max_length: int = MAX_SEQ_LENGTH):
        """A batch: ``(input_ids (b, s), attention_mask (b, s))``, padded on the right with [PAD].

        ``attention_mask`` is 1 for real tokens and 0 for padding.
        """
        if isinstance(texts, str):
            texts = [texts]
        rows = [self.encode(t, max_length) for t in texts]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r)
            mask[i, : len(r)] = 1
        return ids, mask

    def convert_ids_to_tokens(self, ids) -> list[str]:
        return [self.vocab[int(i)] for i in ids]
