"""Offline text data for the Appendix H experiments: WordNet 3.0 from Debian's
``wordnet-base`` (``wordnet``), a WordPiece tokenizer and BERT pre-training batches
(``text``), and the MNLI / SQuAD analogue tasks (``tasks``)."""
