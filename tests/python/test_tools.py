"""The device-side analysis tools that a GPU session runs once and cannot debug there:
tools/kernel_breakdown.py on Nsight Compute's CSV layout (its own lines before the CSV, a units
row, thousands separators, templated kernel names with anonymous namespaces), and
tools/bench_medians.py on gpu_score_bench's rows."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "kernel_breakdown.py"

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
          '"Block Size","Grid Size","Device","CC","gpu__time_duration.sum"\n')


def row(i, name, value):
    return (f'"{i}","1","p","h","{name}","1","7","(128, 1, 1)","(8, 1, 1)","0","9.0",'
            f'"{value}"\n')


GEMV = ("void kvevict::gpu::detail::(anonymous namespace)::gemv_kernel<true, "
        "(kvevict::gpu::detail::GemvOut)0, false>(kvevict::gpu::detail::GemvArgs)")
ATTN = ("void kvevict::gpu::detail::(anonymous namespace)::decode_attention_mma_kernel<"
        "kvevict::cuda::detail::WindowTraits<__nv_bfloat16, 128, 1>, false, 0>("
        "kvevict::gpu::detail::(anonymous namespace)::Params)")
EMBED = "kvevict::gpu::detail::(anonymous namespace)::embed_kernel(const __nv_bfloat16 *, int)"


def run(tmp_path, text, *args):
    f = tmp_path / "ncu.csv"
    f.write_text(text)
    return subprocess.run([sys.executable, str(TOOL), str(f), *args], capture_output=True,
                          text=True)


def test_sums_per_kernel_and_per_step(tmp_path):
    text = ("==PROF== Connected to process 1\n" + HEADER +
            '"","","","","","","","","","","","usecond"\n' +
            row(0, EMBED, "1.00") + row(1, GEMV, "3.50") + row(2, ATTN, "1,200.00") +
            row(3, EMBED, "1.00") + row(4, GEMV, "4.50") + row(5, ATTN, "800.00"))
    r = run(tmp_path, text, "--per-kernel", "embed_kernel", "--short")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("6 launches, 2010.0 us of kernel time, 1005.0 us per unit (2 units)")
    assert "decode_attention_mma_kernel" in lines[2] and "2000.0" in lines[2]
    assert "1000.00" in lines[2]  # per step
    gemv = next(ln for ln in lines if ln.endswith("gemv_kernel"))
    assert "8.0" in gemv and "4.00" in gemv


def test_nanosecond_units_are_converted(tmp_path):
    text = HEADER + '"","","","","","","","","","","","nsecond"\n' + row(0, GEMV, "2,500")
    r = run(tmp_path, text)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("1 launches, 2.5 us of kernel time")


def test_bad_inputs_exit_2_with_a_reason(tmp_path):
    r = run(tmp_path, HEADER)  # no launch at all
    assert r.returncode == 2 and "no row with gpu__time_duration.sum" in r.stderr
    r = run(tmp_path, HEADER + row(0, GEMV, "3"))  # no units row
    assert r.returncode == 2 and "no units row" in r.stderr
    text = HEADER + '"","","","","","","","","","","","usecond"\n' + row(0, GEMV, "3")
    r = run(tmp_path, text, "--per-kernel", "embed_kernel")
    assert r.returncode == 2 and "no launch of a kernel named *embed_kernel*" in r.stderr
    r = subprocess.run([sys.executable, str(TOOL), str(tmp_path / "missing.csv")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "missing.csv" in r.stderr


MEDIANS = ROOT / "tools" / "bench_medians.py"


def bench_line(name, ms):
    return f"{name:48s} {ms:9.4f} ms  floor   0.1800 ms  x 2.33  scratch     4.80 MiB\n"


def test_bench_medians_compare_variants_with_their_own_and_the_default_base(tmp_path):
    log = tmp_path / "topab.txt"
    rows = [("dropkv w=32 n=128K (top mode 0)", [0.42, 0.40, 0.41]),
            ("dropkv w=32 n=128K (top mode 2)", [0.40, 0.40, 0.41]),
            ("dropkv w=32 n=128K (top mode 0, overlapped)", [0.396, 0.39, 0.40]),
            ("dropkv w=32 n=128K (top mode 2, overlapped)", [0.36, 0.37, 0.38])]
    log.write_text("device: H100\n" + "".join(bench_line(name, ms) for name, v in rows
                                                for ms in v))
    r = subprocess.run([sys.executable, str(MEDIANS), str(log), "top mode 2"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 4
    assert "0.4100 ms (3 rounds), vs top mode 2 +2.5%" in lines[0]
    # A variant row: against its own variant's mode 2, then against the default kernels' mode 2.
    assert lines[2].endswith("vs top mode 2, overlapped +7.0%, vs top mode 2 -1.0%")
    assert lines[3].endswith("vs top mode 2, overlapped +0.0%, vs top mode 2 -7.5%")
