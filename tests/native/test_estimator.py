"""The estimate |{i: a_i == b_i}| / k against the exact Jaccard of the reference shingle sets."""

from __future__ import annotations

import numpy as np

from neardup import sketch


def make_pair(rng: np.random.Generator, shared: int, only_a: int, only_b: int) -> tuple[str, str, float]:
    # Distinct words, so word 1-shingles are exactly the word sets: J = shared / (shared + a + b).
    first = int(rng.integers(0, 10**9))
    words = [f"t{n}" for n in range(first, first + shared + only_a + only_b)]
    common, a_only, b_only = words[:shared], words[shared : shared + only_a], words[shared + only_a :]
    a = common + a_only
    b = common + b_only
    rng.shuffle(a)
    rng.shuffle(b)
    return " ".join(a), " ".join(b), shared / (shared + only_a + only_b)


def test_estimate_is_unbiased_with_binomial_error() -> None:
    rng = np.random.default_rng(2024)
    k = 128
    errors, bounds, signed = [], [], []
    for _ in range(600):
        total = int(rng.integers(50, 400))
        j = float(rng.uniform(0.05, 0.95))
        shared = round(total * j)
        rest = total - shared
        only_a = int(rng.integers(0, rest + 1))
        a, b, exact = make_pair(rng, shared, only_a, rest - only_a)
        sa, sb = sketch.signatures([a, b], num_perm=k, size=1)
        est = float(sketch.similarity(sa, sb.reshape(1, -1))[0])
        errors.append(abs(est - exact))
        signed.append(est - exact)
        bounds.append(np.sqrt(exact * (1 - exact) / k))
    mae, bound = float(np.mean(errors)), float(np.mean(bounds))
    # For a binomial estimate the mean absolute error is about sqrt(2/pi) * sigma; the issue asks the
    # MAE to be within 10% of sigma-averaged, which it is when the hashes are min-wise enough.
    assert mae <= 1.1 * bound, (mae, bound)
    assert abs(float(np.mean(signed))) < 0.006  # no bias: the mean error is ~0 (se ~0.0017)


def test_estimate_on_overlapping_word_5_shingles_is_unbiased() -> None:
    # Consecutive 5-shingles share four words, so their keys are related (the rolling polynomial)
    # and the hash family is linear: the keys' final mix must hide that. Pairs: a text and a copy with
    # a fraction of its words replaced. (Real text is a harder case: a weaker final mix biased real
    # licence-text pairs by -0.03 at J 0.2-0.4 while passing this test; bench/bench_sketch.py's
    # accuracy section measures real pairs.)
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import reference as ref

    rng = np.random.default_rng(77)
    vocab = np.array([f"v{i}" for i in range(3000)])
    k = 128
    a_texts, b_texts, exact = [], [], []
    for _ in range(500):
        words = rng.choice(vocab, size=int(rng.integers(150, 400)))
        edited = words.copy()
        positions = rng.random(len(words)) < rng.uniform(0.01, 0.25)
        edited[positions] = rng.choice(vocab, size=int(positions.sum()))
        a, b = " ".join(words), " ".join(edited)
        a_texts.append(a)
        b_texts.append(b)
        exact.append(ref.jaccard(ref.shingles(a), ref.shingles(b)))
    sa = sketch.signatures(a_texts, num_perm=k)
    sb = sketch.signatures(b_texts, num_perm=k)
    est = (sa == sb).mean(axis=1)
    truth = np.array(exact)
    assert truth.min() < 0.3 and truth.max() > 0.8  # a spread of similarities
    errors = est - truth
    bound = float(np.mean(np.sqrt(truth * (1 - truth) / k)))
    assert float(np.mean(np.abs(errors))) <= 1.1 * bound
    assert abs(float(np.mean(errors))) < 0.006, float(np.mean(errors))  # se of the mean ~0.0015


def test_dense_estimate_is_unbiased_and_sharper_than_minhash_slots() -> None:
    # The estimate sketch's dense mode (2-bit one-permutation bins): no bias, and an error well under
    # the 128-slot MinHash's binomial sqrt(J (1 - J) / 128), in fewer stored bytes.
    rng = np.random.default_rng(16)
    slot_errors, bin_errors, signed = [], [], []
    for _ in range(300):
        total = int(rng.integers(400, 3000))
        j = float(rng.uniform(0.5, 1.0))
        shared = round(total * j)
        rest = total - shared
        only_a = int(rng.integers(0, rest + 1))
        a, b, exact = make_pair(rng, shared, only_a, rest - only_a)
        sigs, bins = sketch.adaptive_sketches([a, b], size=1)
        assert bins[0, 0] == 0 and bins[1, 0] == 0  # dense
        slots = float(sketch.similarity(sigs[0], sigs[1:2])[0])
        estimate = float(sketch.adaptive_similarity(bins[0], bins[1:2])[0])
        slot_errors.append(abs(slots - exact))
        bin_errors.append(abs(estimate - exact))
        signed.append(estimate - exact)
    assert abs(float(np.mean(signed))) < 0.003
    assert float(np.mean(bin_errors)) < 0.6 * float(np.mean(slot_errors)), (
        np.mean(bin_errors),
        np.mean(slot_errors),
    )


def test_exact_similarity_is_the_jaccard_of_the_shingle_hash_sets() -> None:
    rng = np.random.default_rng(17)
    texts, truths = [], []
    for _ in range(60):
        total = int(rng.integers(1, 400))
        shared = int(rng.integers(0, total + 1))
        only_a = int(rng.integers(0, total - shared + 1))
        a, b, exact = make_pair(rng, shared, only_a, total - shared - only_a)
        texts += [a, b]
        truths.append(exact)
    _, flat, offsets = sketch.exact_sketches(texts, size=1)
    for k, exact in enumerate(truths):
        q = flat[offsets[2 * k] : offsets[2 * k + 1]]
        got = float(sketch.exact_similarity(q, flat, offsets, [2 * k + 1])[0])
        assert abs(got - exact) < 1e-6, (k, got, exact)
        # With a floor the merge may stop early: above it the exact value, below it 0.0.
        floored = float(sketch.exact_similarity(q, flat, offsets, [2 * k + 1], floor=0.6)[0])
        assert floored == (got if exact >= 0.6 - 1e-9 else 0.0)


def test_sparse_estimate_is_unbiased_and_sharper_than_the_dense_one_on_short_documents() -> None:
    # Sets of 60 to 190 shingles are stored whole (a code of at least 6 bits per shingle beside the
    # 1,408-bin bitmap) and compared shingle by shingle, against the same documents' two bit planes
    # (the reference's, as a dense sketch); long documents are dense.
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import reference as ref

    rng = np.random.default_rng(316)
    dense_errors, sparse_errors, signed = [], [], []
    for n in range(400):
        total = int(rng.integers(60, 190)) if n < 300 else int(rng.integers(2000, 4000))
        j = float(rng.uniform(0.6, 1.0))
        shared = round(total * j)
        rest = total - shared
        only_a = int(rng.integers(0, rest + 1))
        a, b, exact = make_pair(rng, shared, only_a, rest - only_a)
        _, stored = sketch.adaptive_sketches([a, b], size=1, bins=1408)
        estimate = float(sketch.adaptive_similarity(stored[0], stored[1:2], bins=1408)[0])
        if n < 300:
            assert stored[0, 0] >= 6 and stored[1, 0] >= 6  # sparse, wide codes
            planes = [b"\x00" + ref.oph_bins(t, bins=1408, bits=2, size=1) for t in (a, b)]
            dense = np.frombuffer(b"".join(planes), np.uint8).reshape(2, -1)
            dense_errors.append(
                abs(float(sketch.adaptive_similarity(dense[0], dense[1:2], bins=1408)[0]) - exact)
            )
            sparse_errors.append(abs(estimate - exact))
            signed.append(estimate - exact)
        else:
            assert stored[0, 0] == 0 and stored[1, 0] == 0  # dense
    assert abs(float(np.mean(signed))) < 0.001
    assert float(np.mean(sparse_errors)) < 0.25 * float(np.mean(dense_errors)), (
        np.mean(sparse_errors),
        np.mean(dense_errors),
    )
