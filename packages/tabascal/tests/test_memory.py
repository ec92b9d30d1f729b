import jax
import jax.numpy as jnp
import numpy as np

from tabascal import memory


def test_live_bytes_count_a_new_array_on_its_device():
    before = memory.live_bytes_per_device()
    x = jax.device_put(np.ones((1000, 25), np.float32), jax.devices()[0])
    after = memory.live_bytes_per_device()
    assert after[0] - before[0] == 1000 * 25 * 4
    del x


def test_stage_memory_reports_arguments_and_outputs_of_a_program():
    compiled = jax.jit(lambda x: x * 2.0).lower(jnp.ones((256, 64), jnp.float32)).compile()
    stage = memory.stage_memory(compiled)
    assert stage.arguments == 256 * 64 * 4
    assert stage.outputs == 256 * 64 * 4


def test_donated_argument_is_counted_as_aliased():
    f = jax.jit(lambda x: x + 1.0, donate_argnums=0)
    stage = memory.stage_memory(f.lower(jnp.ones((128, 128), jnp.float32)).compile())
    assert stage.aliased == 128 * 128 * 4
    assert stage.working_set == stage.outputs + stage.temporaries - stage.aliased


def test_cpu_peak_is_live_bytes_plus_the_largest_stage():
    assert memory.allocator_peak_bytes() is None  # CPU devices keep no allocator statistics
    stages = [memory.StageMemory(0, 100, 50, 0, 0), memory.StageMemory(0, 10, 500, 10, 0)]
    live = memory.live_bytes_per_device()
    peak = memory.peak_bytes_per_device(stages)
    # Nothing is allocated between the two calls, so the live bytes are unchanged.
    assert peak == [b + 500 for b in live]
