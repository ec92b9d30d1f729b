"""One process of a 2-process run: agreement on failures, and rows gathered to every process.

argv: coordinator process_id fail_in (a process id, or -1 for no failure) [checkpoint_dir]
"""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

from tabascal.parallel import processes

coordinator, process_id, fail_in = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
processes.initialize(processes.launch_from(
    {}, coordinator=coordinator, num_processes=2, process_id=process_id
))  # fmt: skip

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec  # noqa: E402

mesh = jax.make_mesh((jax.device_count(),), ("bl",))
host = np.arange(8 * 3, dtype=np.float64).reshape(8, 3)
x = jax.make_array_from_callback(
    host.shape, NamedSharding(mesh, PartitionSpec("bl")), lambda index: host[index]
)
print("local rows", sorted(s.index[0].start for s in x.addressable_shards), flush=True)
blocks = [processes.host_rows(x, start, min(start + 3, 8)) for start in range(0, 8, 3)]
print("gathered equal", bool(np.array_equal(np.concatenate(blocks), host)), flush=True)
try:  # rows 8 and 9 are past the array's end: no process holds them
    processes.host_rows(x, 6, 10)
except ValueError as err:
    print("rows no process holds:", err, flush=True)
try:
    with processes.stage("checking the output folder"):
        if process_id == fail_in:
            raise FileExistsError("out/ is not empty")
except processes.PeerFailure as err:
    print("peer failure:", err, flush=True)
    sys.exit(3)
except FileExistsError as err:
    print("own failure:", err, flush=True)
    sys.exit(2)
print("writer", processes.is_writer(), flush=True)
if len(sys.argv) > 4:
    from tabascal.fitting import checkpoint, phases

    replicated = jax.device_put(np.int32(7), NamedSharding(mesh, PartitionSpec()))
    state = phases.FitState({"z": x}, (), replicated)
    history = checkpoint.FitHistory(np.arange(7.0), np.ones(7))
    checkpoint.save_checkpoint(sys.argv[4], state, history)
    print("checkpoint done", flush=True)
