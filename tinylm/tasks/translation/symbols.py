"""The id a decoder-only batch of pairs holds besides symbols, shared by the data, decoding and scores
(the symbols PAD_ID, BEGIN_ID and END_ID are the model's: ``tinylm.models.seq2seq``)."""

IGNORE = -100  # cross-entropy's default ignore_index: the positions of a decoder-only batch that are not scored
