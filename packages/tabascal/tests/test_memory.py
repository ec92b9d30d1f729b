import jax
import jax.numpy as jnp
import numpy as np

from tabascal.planning import memory


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


def _host_bytes_from_proc() -> int:
    with open("/proc/meminfo") as meminfo:
        line = next(line for line in meminfo if line.startswith("MemTotal:"))
    return int(line.split()[1]) * 1024


def test_a_cpu_device_has_the_host_memory_shared_by_the_cpu_devices():
    n_cpu = len(jax.devices("cpu"))
    got = memory.device_memory_bytes(jax.devices("cpu")[0])
    # /proc/meminfo's MemTotal (kB) is the kernel's total usable memory, the figure the
    # physical page count multiplies out to.
    assert abs(got - _host_bytes_from_proc() // n_cpu) <= 1024


class _Gpu:
    platform = "gpu"

    def memory_stats(self):
        return {"bytes_in_use": 10, "bytes_limit": 100 * 2**30}


def test_a_device_with_allocator_statistics_has_its_allocator_limit():
    assert memory.device_memory_bytes(_Gpu()) == 100 * 2**30


# Lines as XLA prints them in a compiled SPMD program's HLO (names and shapes shortened).
HLO = """\
  %all-reduce = f64[] all-reduce(f64[] %add.1), channel_id=1, replica_groups={{0,1,2,3}}
  %all-reduce.1 = (f64[9,2,2,30]{3,2,1,0}) all-reduce(%fusion.2), channel_id=2
  %all-gather-start = (f32[8]{0}, f32[32]{0}) all-gather-start(f32[8]{0} %p), dimensions={0}
  %all-gather-done = f32[32]{0} all-gather-done(%all-gather-start)
  %collective-permute.3 = f32[4]{0} collective-permute(f32[4]{0} %x), source_target_pairs={{0,1}}
  %fusion.all-reduce-like = f32[4]{0} fusion(f32[4]{0} %x), kind=kLoop
"""


def test_collectives_are_counted_by_operation_not_by_name():
    # Instruction names that merely contain "all-reduce" and -done halves are not counted.
    assert memory.count_collectives(HLO) == {
        "all-gather": 1,
        "all-reduce": 2,
        "collective-permute": 1,
    }


def test_collective_shapes_list_what_each_collective_moves():
    assert memory.collective_shapes(HLO) == [
        ("all-reduce", (("f64", ()),)),
        ("all-reduce", (("f64", (9, 2, 2, 30)),)),
        ("all-gather", (("f32", (8,)), ("f32", (32,)))),
        ("collective-permute", (("f32", (4,)),)),
    ]


def test_a_single_device_program_has_no_collectives():
    compiled = jax.jit(lambda x: (x * 2.0).sum()).lower(jnp.ones((16, 4))).compile()
    assert memory.count_collectives(compiled) == {}


def test_a_buffer_read_through_its_shards_is_counted_once():
    x = jax.device_put(np.ones((64, 8), np.float32), jax.devices()[0])
    before = memory.live_bytes_per_device()
    views = [shard.data for shard in x.addressable_shards]  # live arrays over x's buffer
    assert memory.live_bytes_per_device() == before
    del x, views
