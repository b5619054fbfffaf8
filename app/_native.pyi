"""Type stub of the compiled sketch core (native/bindings.cpp). Use neardup.sketch, not this module."""

import numpy as np
import numpy.typing as npt

UNICODE_VERSION: str

def active_isa() -> str: ...
def available_isas() -> list[str]: ...
def signatures(
    texts: list[str],
    num_perm: int,
    char_mode: bool,
    size: int,
    seed: int,
    normalize: bool,
    lowercase: bool,
    collapse: bool,
    threads: int,
    isa: str,
) -> npt.NDArray[np.uint32]: ...
def similarity(
    query: npt.NDArray[np.uint32],
    candidates: npt.NDArray[np.uint32],
    rows: npt.NDArray[np.int64],
    use_rows: bool,
    isa: str,
) -> npt.NDArray[np.float32]: ...
def band_keys(
    signatures: npt.NDArray[np.uint32], bands: int, rows: int, salt: int
) -> npt.NDArray[np.uint64]: ...
def sketch_adaptive(
    texts: list[str],
    num_perm: int,
    char_mode: bool,
    size: int,
    seed: int,
    normalize: bool,
    lowercase: bool,
    collapse: bool,
    threads: int,
    isa: str,
    bins: int,
) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint8]]: ...
def adaptive_similarity(
    query: npt.NDArray[np.uint8],
    candidates: npt.NDArray[np.uint8],
    rows: npt.NDArray[np.int64],
    use_rows: bool,
    bins: int,
    isa: str,
) -> npt.NDArray[np.float32]: ...
def sketch_exact(
    texts: list[str],
    num_perm: int,
    char_mode: bool,
    size: int,
    seed: int,
    normalize: bool,
    lowercase: bool,
    collapse: bool,
    threads: int,
    isa: str,
) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32], npt.NDArray[np.int64]]: ...
def exact_similarity(
    query: npt.NDArray[np.uint32],
    flat: npt.NDArray[np.uint32],
    offsets: npt.NDArray[np.int64],
    rows: npt.NDArray[np.int64],
    use_rows: bool,
    floor: float,
    isa: str,
) -> npt.NDArray[np.float32]: ...
def normalized_text(text: str, char_mode: bool, normalize: bool, lowercase: bool, collapse: bool) -> str: ...
def passage_features(
    text: str, k: int, w: int
) -> tuple[
    npt.NDArray[np.uint32],
    npt.NDArray[np.uint32],
    npt.NDArray[np.uint64],
    npt.NDArray[np.uint32],
    npt.NDArray[np.uint8],
]: ...
def passage_blob(text: str, k: int, w: int) -> bytes: ...

class AlignParams:
    def __init__(
        self,
        k: int,
        gap: int,
        drift: int,
        tries: int,
        max_active: int,
        agreement: float,
        stop: int,
        min_words: int,
        single_hit_differing: int,
    ) -> None: ...

def passage_align(
    qkeys: npt.NDArray[np.uint64],
    qpos: npt.NDArray[np.int64],
    skeys: npt.NDArray[np.uint64],
    sword: npt.NDArray[np.int64],
    qn: npt.NDArray[np.uint8],
    sn: npt.NDArray[np.uint8],
    params: AlignParams,
) -> npt.NDArray[np.int64]: ...
def passage_positions(
    blob: bytes, m: int, at: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], int]: ...
