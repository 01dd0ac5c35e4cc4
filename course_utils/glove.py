"""Real pretrained word vectors: the 20,000 most frequent words of GloVe 6B, 50 dimensions.

The file ships inside the package (``data/glove.6B.50d.top20k.npz``, 2 MB, public domain;
``data/PROVENANCE.md`` says exactly where it comes from), so nothing is downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

import numpy as np

GLOVE_FILE = "glove.6B.50d.top20k.npz"


@dataclass(frozen=True)
class WordVectors:
    """Words and their vectors. ``vectors[i]`` is the vector of ``words[i]``."""

    words: list[str]
    vectors: np.ndarray  # (V, d) float32
    index: dict[str, int] = field(repr=False)

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self.index

    def id(self, word: str) -> int:
        """The row of ``word``; a clear KeyError for words outside the vocabulary."""
        try:
            return self.index[word]
        except KeyError:
            raise KeyError(
                f"{word!r} is not among the {len(self.words):,} GloVe words shipped with the "
                "course (lower-case, most frequent words only)"
            ) from None

    def ids(self, words) -> np.ndarray:
        return np.array([self.id(w) for w in words], dtype=np.int64)

    def __getitem__(self, word: str) -> np.ndarray:
        return self.vectors[self.id(word)]

    @property
    def dim(self) -> int:
        return self.vectors.shape[1]


@lru_cache(maxsize=1)
def load_glove() -> WordVectors:
    """Load the shipped GloVe subset (float16 on disk, float32 in memory, about 4 MB)."""
    with resources.files("course_utils.data").joinpath(GLOVE_FILE).open("rb") as fh:
        data = np.load(fh, allow_pickle=False)
        words = [str(w) for w in data["words"]]
        vectors = data["vectors"].astype(np.float32)
    return WordVectors(words=words, vectors=vectors, index={w: i for i, w in enumerate(words)})
