"""Character ranges of scripts written without spaces between words.

Indexing (hash embedder, BM25) treats runs of these characters as CJK text:
character unigrams and bigrams rather than whitespace words. The chunker keeps
its own wider table (it also counts CJK punctuation as tokens).
"""

CJK_WORD_CHARS = (
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uac00-\ud7af"  # hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
)
"""For use inside a regular-expression character class."""
