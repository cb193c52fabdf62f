"""scripts/prebuild_variant.py: which sources a -D variant recompiles (pure Python; the build itself needs nvcc).

A variant's flag must reach every file whose code it can change (through the file or any project header it
includes), or the "variant" library silently holds the default code; and no other, or every variant rebuilds all.
"""
import importlib.util
from pathlib import Path

from sympathy.attention import cuda_build

_PATH = Path(__file__).resolve().parents[1] / "scripts" / "prebuild_variant.py"
_spec = importlib.util.spec_from_file_location("prebuild_variant", _PATH)
pv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pv)
SRC = cuda_build.source_dir()


def test_includes_are_followed_through_headers():
    names = {h.name for h in pv.includes(SRC / "attention_hopper_bwd.cu", SRC)}
    # hopper_primitives.cuh is reached only through other headers (hopper_bwd_pipeline.cuh and others)
    assert {"hopper_bwd_pipeline.cuh", "hopper_bwd_config.cuh", "hopper_primitives.cuh"} <= names


def test_a_flag_reaches_the_files_that_use_its_macro_and_no_other():
    flag = ["-DSY_HOPPER_BWD_LPT=0"]
    using = {cu.name for cu in cuda_build.sources() if pv.flags_for(cu, SRC, flag)}
    assert using == {"attention_hopper_bwd.cu"}
    # a macro read only in a header (hopper_bwd_config.cuh) still reaches the file that includes it
    assert pv.flags_for(SRC / "attention_hopper_bwd.cu", SRC, ["-DSY_HOPPER_BWD_D128_STAGES=3"])
    assert pv.flags_for(SRC / "attention_mma.cu", SRC, ["-DSY_HOPPER_BWD_D128_STAGES=3"]) == []
