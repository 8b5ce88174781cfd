import math

from engram_embed import HashingEmbedder


async def test_same_text_same_vector_across_instances() -> None:
    a = await HashingEmbedder(64).embed(["the cat sat", "on the mat"])
    b = await HashingEmbedder(64).embed(["the cat sat", "on the mat"])
    assert a == b


def test_vector_is_stable_across_processes() -> None:
    # Pinned, so a change of hash function (or Python's salted hash()) is caught.
    vec = HashingEmbedder(8).embed_one("cat")
    assert [round(x, 6) for x in vec] == [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]


async def test_vectors_are_unit_length_with_the_configured_dimension() -> None:
    texts = ["", "   ", "!!!", "one", "Many words, repeated repeated repeated.", "x " * 5000]
    for vec in await HashingEmbedder(32).embed(texts):
        assert len(vec) == 32
        assert math.isclose(math.fsum(x * x for x in vec), 1.0, rel_tol=1e-9)


async def test_shared_words_are_closer_than_unrelated_ones() -> None:
    a, b, c = await HashingEmbedder().embed(
        ["the cat sat on the mat", "a cat sat on a rug", "quarterly revenue grew"]
    )

    def cos(u: list[float], v: list[float]) -> float:
        return sum(x * y for x, y in zip(u, v, strict=True))

    assert cos(a, b) > cos(a, c)


def test_model_name_says_hashing() -> None:
    emb = HashingEmbedder(16)
    assert "hashing" in emb.model_name
    assert emb.dimension == 16


async def test_empty_input_gives_no_vectors() -> None:
    assert await HashingEmbedder().embed([]) == []
