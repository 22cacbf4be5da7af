"""Synthetic data for the chapters: generated on the spot, never downloaded.

Every sequence task follows one interface (``task.py``): built with all its sizes, it has
``vocab_size`` and ``batch(batch_size, generator)`` → a tuple of long tensors.

- ``tokens.py``: PAD, BOS, EOS, FIRST_SYMBOL and ``pad_batch``, the id conventions of every module.
- ``task.py``: ``Task``, the interface, and the table of what each task's ``batch`` returns.
- ``translation.py``: ``SyntheticTranslation`` and ``exact_match`` — chapters 2 and 6 (1, 7).
- ``recall.py``: ``MarkedRecall`` — chapters 1 and 7.
- ``probes.py``: ``CopyTask``, ``TwoRelationTask``, ``LagTask`` — chapters 3, 4, 5.
- ``text.py``: the toy grammar, ``CharVocab`` and ``lm_batch`` — chapter 6.
- ``markov.py``: ``MarkovSource``, a source of known entropy — chapter 8.
- ``corpus.py``: ``build_corpus``, real text from the course's own pages and the standard library — chapter 9.
"""
from .corpus import Corpus, Document, build_corpus
from .markov import MarkovSource
from .probes import CopyTask, LagTask, TwoRelationTask
from .recall import MarkedRecall
from .task import Task
from .text import GRAMMAR, CharVocab, grammar_accepts, grammar_sentence, grammar_text, lm_batch
from .tokens import BOS, EOS, FIRST_SYMBOL, PAD, pad_batch
from .translation import SyntheticTranslation, exact_match

__all__ = ["BOS", "EOS", "FIRST_SYMBOL", "GRAMMAR", "PAD", "CharVocab", "CopyTask", "Corpus", "Document", "LagTask",
           "MarkedRecall", "MarkovSource", "SyntheticTranslation", "Task", "TwoRelationTask", "build_corpus",
           "exact_match", "grammar_accepts",
           "grammar_sentence", "grammar_text", "lm_batch", "pad_batch"]
