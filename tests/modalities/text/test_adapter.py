"""Text adapter: tokenizer, vocabulary, the three embeddings, padded-batch invariance."""

import logging

import pytest
import torch

from seqattn.modalities.text.adapter import TextAdapter
from seqattn.modalities.text.chars import build_char_vocabulary
from seqattn.modalities.text.vocab import PAD, UNK, UNK_INDEX, Vocabulary, read_word_vectors, tokenize
from seqattn.core import Encoder
from seqattn.model.heads import TokenHead
from seqattn.model.network import SequenceModel

SENTENCES = [["I", "saw", "a", "saw"], ["they", "can", "fish"], ["a", "saw", "can", "fly", "."]]


def test_tokenize_splits_words_and_punctuation():
    assert tokenize("Not bad, but boring!") == ["Not", "bad", ",", "but", "boring", "!"]
    assert tokenize("Don't re-read it.", lowercase=True) == ["don't", "re-read", "it", "."]
    with pytest.raises(ValueError, match="expects a str"):
        tokenize(["a"])


def test_vocabulary_counts_min_freq_max_size_and_round_trips():
    vocab = Vocabulary.build(SENTENCES, lowercase=True)
    words = vocab.to_list()
    assert words[:2] == [PAD, UNK]
    assert words[2:5] == ["saw", "a", "can"]  # by frequency (3, 2, 2), ties alphabetical
    assert Vocabulary(words).encode(["saw", "zebra"]) == [2, UNK_INDEX]
    assert Vocabulary.build(SENTENCES, min_freq=2, lowercase=True).to_list() == [PAD, UNK, "saw", "a", "can"]
    assert len(Vocabulary.build(SENTENCES, max_size=1)) == 3
    cased = Vocabulary.build(SENTENCES, lowercase=False)
    assert "I" in cased and "i" not in cased
    with pytest.raises(ValueError, match="must start"):
        Vocabulary(["a", "b"])
    with pytest.raises(ValueError, match="twice"):
        Vocabulary([PAD, UNK, "a", "a"])
    with pytest.raises(ValueError, match="min_freq"):
        Vocabulary.build(SENTENCES, min_freq=0)


def _adapter(**kwargs):
    vocab = Vocabulary.build(SENTENCES, lowercase=True).to_list()
    return TextAdapter(16, vocab, lowercase=True, **kwargs)


def test_adapter_returns_tokens_with_mask_ids_and_alignment():
    adapter = _adapter().eval()
    tokens = adapter([["I", "saw", "a", "Zebra"], ["fish"]])
    assert tokens.x.shape == (2, 4, 16)
    assert tokens.mask.tolist() == [[True] * 4, [True, False, False, False]]
    ids = tokens.extra["ids"]
    assert ids[0, 3] == UNK_INDEX and ids[1, 1:].tolist() == [0, 0, 0]
    assert tokens.extra["word_index"].tolist() == [[0, 1, 2, 3], [0, -1, -1, -1]]
    assert (tokens.x[1, 1:] == 0).all()  # padding is zero
    with pytest.raises(ValueError, match="list of sentences"):
        adapter("I saw a saw")
    with pytest.raises(ValueError, match="words\\[0\\]"):
        adapter(["I saw"])


def test_unknown_words_and_case_map_like_the_vocabulary():
    adapter = _adapter().eval()
    a = adapter([["SAW", "quokka"]]).x
    b = adapter([["saw", "wombat"]]).x
    torch.testing.assert_close(a, b)  # lowercased; two unknown words share <unk>


@pytest.mark.parametrize("embedding", ["learned", "onehot"])
def test_padded_batch_gives_each_sentence_the_output_it_has_alone(embedding):
    """Adapter + encoder + head: a sentence's logits do not depend on the other sentences of its batch."""
    torch.manual_seed(0)
    adapter = _adapter(embedding=embedding, dropout=0.1)
    model = SequenceModel(adapter, Encoder(16, depth=2, heads=2), TokenHead(16, 5)).eval()
    batch = model({"words": SENTENCES})["logits"]  # [3, 5, 5]
    for i, sentence in enumerate(SENTENCES):
        alone = model({"words": [sentence]})["logits"]  # [1, n, 5]
        torch.testing.assert_close(batch[i, : len(sentence)], alone[0], atol=1e-5, rtol=1e-5)


def test_onehot_vectors_are_fixed_and_projected():
    adapter = _adapter(embedding="onehot").eval()
    assert adapter.table is None
    assert [name for name, _ in adapter.named_parameters()] == ["proj.weight", "proj.bias"]  # nothing else trains
    vocab = adapter.vocab
    x = adapter([["saw", "fish"]]).x[0]  # [2, 16]
    expected = adapter.proj.weight[:, [vocab.index["saw"], vocab.index["fish"]]].t() + adapter.proj.bias
    torch.testing.assert_close(x, expected)  # Linear(one-hot e_i) = column i + bias
    with pytest.raises(ValueError, match="freeze"):
        _adapter(embedding="onehot", freeze=True)


def test_learned_table_trains_and_freeze_keeps_it_fixed():
    for freeze in (False, True):
        adapter = _adapter(freeze=freeze, embedding_dim=8)
        assert isinstance(adapter.proj, torch.nn.Linear)  # 8 -> 16
        before = adapter.table.weight.detach().clone()
        optimizer = torch.optim.SGD([p for p in adapter.parameters() if p.requires_grad], lr=0.5)
        adapter(SENTENCES).x.pow(2).sum().backward()
        optimizer.step()
        changed = not torch.equal(before, adapter.table.weight)
        assert changed != freeze
        assert adapter.table.weight.requires_grad != freeze


def _vector_file(path, header=True):
    lines = ["3 4"] if header else []
    lines += ["saw 1 0 0 0", "fish 0 1 0 0", "Can 0 0 1 0"]  # "Can" is not the vocabulary's "can"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("header", [True, False])
def test_pretrained_vectors_are_loaded_missing_words_counted(tmp_path, caplog, header):
    path = _vector_file(tmp_path / "vec.txt", header)
    vectors, dim = read_word_vectors(path)
    assert dim == 4 and set(vectors) == {"saw", "fish", "Can"}
    with caplog.at_level(logging.INFO, logger="seqattn.modalities.text"):
        adapter = _adapter(embedding="pretrained", pretrained_path=str(path), freeze=True)
    vocab = adapter.vocab
    assert adapter.table.weight.shape == (len(vocab), 4)
    torch.testing.assert_close(adapter.table.weight[vocab.index["saw"]], torch.tensor([1.0, 0, 0, 0]))
    torch.testing.assert_close(adapter.table.weight[vocab.index["fish"]], torch.tensor([0.0, 1, 0, 0]))
    assert adapter.missing_words == len(vocab) - 2 - 2  # every word but saw and fish
    assert f"{adapter.missing_words} missing" in caplog.text
    assert not adapter.table.weight.requires_grad  # freeze
    assert adapter(SENTENCES).x.shape == (3, 5, 16)  # 4 -> 16 by the projection


def test_pretrained_errors_name_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("saw 1 0 0\nfish 0 1\n")
    with pytest.raises(ValueError, match="bad.txt:2"):
        read_word_vectors(bad)
    with pytest.raises(ValueError, match="does not exist"):
        _adapter(embedding="pretrained", pretrained_path=str(tmp_path / "missing.txt"))
    with pytest.raises(ValueError, match="pretrained_path"):
        _adapter(embedding="pretrained")
    with pytest.raises(ValueError, match="embedding_dim=5"):
        _adapter(embedding="pretrained", pretrained_path=str(_vector_file(tmp_path / "v.txt")), embedding_dim=5)
    # a checkpoint whose vector file is gone still builds when the width is given
    assert _adapter(embedding="pretrained", pretrained_path=str(tmp_path / "gone.txt"),
                    embedding_dim=4).table.weight.shape[1] == 4


def test_bad_arguments_are_value_errors():
    vocab = Vocabulary.build(SENTENCES).to_list()
    with pytest.raises(ValueError, match="vocab"):
        TextAdapter(16, None)
    with pytest.raises(ValueError, match="embedding='glove'"):
        TextAdapter(16, vocab, embedding="glove")
    with pytest.raises(ValueError, match="word_dropout"):
        TextAdapter(16, vocab, word_dropout=1.0)


def test_a_word_that_is_not_a_string_is_named_by_its_position():
    adapter = TextAdapter(8, Vocabulary.build(SENTENCES).to_list(), char_dim=4,
                          chars=build_char_vocabulary(w for s in SENTENCES for w in s))
    with pytest.raises(ValueError, match=r"words\[1\]\[2\] must be a str \(one word\), got int: 3"):
        adapter([["a", "saw"], ["they", "can", 3]])
    with pytest.raises(ValueError, match=r"words\[0\]\[0\] must be a str \(one word\), got list"):
        adapter([[["a"]]])


def test_word_dropout_only_in_training():
    adapter = _adapter(word_dropout=0.5)
    adapter.eval()
    torch.testing.assert_close(adapter(SENTENCES).x, adapter(SENTENCES).x)
    adapter.train()
    torch.manual_seed(0)
    assert not torch.equal(adapter(SENTENCES * 5).x, adapter.eval()(SENTENCES * 5).x)


def test_ids_entry_point_for_export_equals_the_words_path():
    adapter = _adapter().eval()
    words = [["the", "dog", "saw", "a", "saw"], ["dogs", "run"]]
    batch = adapter.export_inputs_from({"words": words})
    assert batch["ids"].dtype == torch.long and batch["mask"].tolist()[1] == [True, True, False, False, False]
    by_words, by_ids = adapter(words), adapter(ids=batch["ids"], mask=batch["mask"])
    torch.testing.assert_close(by_ids.x, by_words.x)
    assert torch.equal(by_ids.mask, by_words.mask)
    with pytest.raises(ValueError, match="needs words, or ids"):
        adapter(ids=batch["ids"])
    with pytest.raises(ValueError, match="bool mask of the same shape"):
        adapter(ids=batch["ids"], mask=batch["mask"][:, :2])


def test_token_targets_are_vocabulary_ids_with_unknown_words_as_unk_and_padding_not_maskable():
    vocab = Vocabulary.build(SENTENCES, lowercase=True).to_list()
    adapter = TextAdapter(16, vocab, lowercase=True, char_dim=8, chars=build_char_vocabulary(w for s in SENTENCES for w in s))
    words = [["I", "saw", "a", "zebra"], ["they", "can"]]
    targets = adapter.token_targets({"words": words})
    assert adapter.token_target_layout().kind == "class" and adapter.token_target_layout().size == len(vocab)
    assert targets.kind == "class" and targets.size == len(vocab)
    assert targets.values[0].tolist() == [vocab.index("i"), vocab.index("saw"), vocab.index("a"), UNK_INDEX]
    assert targets.maskable.tolist() == [[True] * 4, [True, True, False, False]]  # padding is never maskable
    ids, mask = adapter.encode(words)
    same = adapter.token_targets({"ids": ids, "mask": mask})  # the export inputs give the same targets
    assert torch.equal(same.values, targets.values) and torch.equal(same.maskable, targets.maskable)
    # hiding replaces the whole vector, the character features of the word included
    tokens = adapter(words)
    hide = torch.zeros(2, 4, dtype=torch.bool)
    hide[0, 3] = True
    vector = torch.full((16,), 7.0)
    hidden = adapter.mask_tokens(tokens, hide, vector)
    assert torch.equal(hidden.x[0, 3], vector) and torch.equal(hidden.x[~hide], tokens.x[~hide])


def test_char_ids_mark_word_edges_cut_long_words_and_stay_the_same_when_cached(monkeypatch):
    from seqattn.modalities.text import chars as chars_module

    table = build_char_vocabulary(["abc", "xyz"])  # <pad> <unk> <w> </w> a b c x y z
    encoder = chars_module.CharEncoder(table, dim=4, max_chars=6)
    pad, unk, bow, eow, a, b, c = 0, 1, 2, 3, 4, 5, 6
    expected = torch.tensor([
        [[bow, a, b, eow, pad, pad], [bow, c, unk, a, eow, pad]],          # "ab", "cQa" (Q unknown)
        [[bow, a, b, c, a, eow], [pad] * 6],                               # "abcabc" cut to 4 characters
    ])
    words = [["ab", "cQa"], ["abcabc"]]
    assert torch.equal(encoder.encode(words), expected)
    assert torch.equal(encoder.encode(words), expected)  # the second time from the cache
    assert torch.equal(encoder.encode([["ab"]]), expected[:1, :1, :4])  # width from the longest word: 2 + 2
    monkeypatch.setattr(chars_module, "CACHE_WORDS", 2)  # a full cache starts again, same ids
    encoder = chars_module.CharEncoder(table, dim=4, max_chars=6)
    for _ in range(3):
        assert torch.equal(encoder.encode(words), expected) and len(encoder._ids) <= 2
    assert encoder.encode([]).shape == (0, 0, 3)


def test_character_features_of_distinct_words_equal_the_per_slot_path_with_gradients():
    from seqattn.modalities.text.chars import CharEncoder

    torch.manual_seed(0)
    words = [["saw", "a", "saw", "Saw"], ["a", "sawing"], ["saw"]]  # repeats, case, padding slots
    encoder = CharEncoder(build_char_vocabulary(w for s in words for w in s), dim=6)
    char_ids, where = encoder.encode_distinct(words)
    assert char_ids.shape[0] == 4 and where.tolist() == [[0, 1, 0, 2], [1, 3, 4, 4], [0, 4, 4, 4]]
    weight = torch.randn(3, 4, 6)
    per_slot = encoder(encoder.encode(words))
    (per_slot * weight).sum().backward()
    grads = [p.grad.clone() for p in encoder.parameters()]
    encoder.zero_grad()
    distinct = encoder.forward_words(words)
    (distinct * weight).sum().backward()
    torch.testing.assert_close(distinct, per_slot)
    assert distinct[1, 2:].abs().sum() == 0 and distinct[2, 1:].abs().sum() == 0  # padding words: zero
    for p, g in zip(encoder.parameters(), grads):
        torch.testing.assert_close(p.grad, g)


def test_character_features_are_the_max_over_a_word_s_own_characters_whatever_the_batch_s_width():
    from seqattn.modalities.text.chars import CharEncoder

    torch.manual_seed(0)
    words = [["a", "saw"], ["extraordinarily"]]  # the short words sit in rows padded to the long word's width
    encoder = CharEncoder(build_char_vocabulary(w for s in words for w in s), dim=8)
    with torch.no_grad():
        encoder.conv.bias.uniform_(0.5, 1.0)  # padding read as a character would win the max in every channel
    features = encoder(encoder.encode(words))  # [2, 2, 8]
    for i, sentence in enumerate(words):
        for j, word in enumerate(sentence):
            ids = torch.from_numpy(encoder._word_ids(word))  # [n]: <w>, the characters, </w>; no padding
            by_hand = torch.relu(encoder.conv(encoder.embedding(ids).T[None]))[0].amax(dim=1)  # [8]
            torch.testing.assert_close(features[i, j], by_hand)
    assert features[1, 1].abs().sum() == 0  # the padding slot


def test_length_groups_are_the_cheapest_cut_of_the_sorted_lengths():
    import itertools

    import numpy as np

    from seqattn.modalities.text.chars import length_groups

    rng = np.random.default_rng(0)
    for _ in range(30):
        lengths = np.sort(rng.integers(1, 12, size=int(rng.integers(1, 25))))
        cost, max_groups = int(rng.integers(0, 20)), int(rng.integers(1, 4))
        groups = length_groups(lengths, cost, max_groups)
        ends = [e for e, _ in groups]
        assert ends[-1] == len(lengths) and ends == sorted(set(ends)) and len(groups) <= max_groups
        starts = [0, *ends[:-1]]
        assert all(w == lengths[e - 1] for (e, w) in groups)  # each group as wide as its longest word
        found = sum((e - s) * w for s, (e, w) in zip(starts, groups)) + cost * len(groups)
        # brute force: every cut between distinct lengths
        cuts = [i for i in range(1, len(lengths)) if lengths[i] != lengths[i - 1]]
        best = min(sum((e - s) * int(lengths[e - 1]) for s, e in zip((0, *c), (*c, len(lengths)))) + cost * (len(c) + 1)
                   for k in range(max_groups) for c in itertools.combinations(cuts, k))
        assert found == best
    assert length_groups(np.array([], dtype=np.int64)) == []
    with pytest.raises(ValueError, match="ascending"):
        length_groups(np.array([3, 2]))


def test_character_features_by_length_groups_equal_one_padded_width_with_gradients(monkeypatch):
    import seqattn.modalities.text.chars as chars_module

    monkeypatch.setattr(chars_module, "GROUP_COST", 0)  # cut wherever a shorter width saves a position
    torch.manual_seed(0)
    words = [["a", "extraordinarily", "saw", "an"], ["sawing", "a", "Saw"], ["interdisciplinary", "it"]]
    encoder = chars_module.CharEncoder(build_char_vocabulary(w for s in words for w in s), dim=6, max_chars=12)
    with torch.no_grad():
        encoder.conv.bias.uniform_(0.5, 1.0)  # padding read as a character would win the max
    char_ids, where, groups = encoder.encode_by_length(words)
    lengths = (char_ids != 0).sum(1)
    assert lengths.tolist() == sorted(lengths.tolist()) and len(groups) > 2  # sorted, several widths
    assert where.tolist()[2][2] == char_ids.shape[0]  # the padding slot: the zero row
    weight = torch.randn(3, 4, 6)
    per_slot = encoder(encoder.encode(words))  # one padded width
    (per_slot * weight).sum().backward()
    grads = [p.grad.clone() for p in encoder.parameters()]
    encoder.zero_grad()
    grouped = encoder.forward_words(words)
    (grouped * weight).sum().backward()
    torch.testing.assert_close(grouped, per_slot)
    for p, g in zip(encoder.parameters(), grads):
        torch.testing.assert_close(p.grad, g)
    with pytest.raises(ValueError, match="end at row"):
        encoder.features(char_ids, groups[:-1])


def test_character_features_pool_like_max_over_the_word_values_and_gradients():
    """The character features (channels-last convolution, max over the real positions) equal the plain conv1d +
    ReLU + masked max(dim=1), values and gradients, for words of several widths and a row of padding only."""
    from seqattn.modalities.text.chars import CharEncoder
    import torch.nn.functional as F

    torch.manual_seed(3)
    encoder = CharEncoder(build_char_vocabulary("abcdefgh"), dim=6)
    char_ids = torch.randint(4, len(encoder.chars), (5, 7))
    char_ids[1, 3:] = 0
    char_ids[2, 1:] = 0
    char_ids[4] = 0  # padding only
    probe = torch.randn(5, 6)
    ours = encoder.features(char_ids)
    grads = torch.autograd.grad((ours * probe).sum(), (encoder.conv.weight, encoder.embedding.weight))
    real = char_ids != 0
    h = F.relu(encoder.conv(encoder.embedding(char_ids).transpose(1, 2)).transpose(1, 2))
    ref = (h * real[:, :, None]).max(dim=1).values
    ref_grads = torch.autograd.grad((ref * probe).sum(), (encoder.conv.weight, encoder.embedding.weight))
    torch.testing.assert_close(ours, ref)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r)
    assert ours[4].abs().sum() == 0 and encoder.features(char_ids[:0]).shape == (0, 6)
