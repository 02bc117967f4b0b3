"""launch.py flags: devices, auth (flag and environment), validation messages."""
import pytest

from app.auth import AuthError, collect_auth, parse_credential
from app.cli import parse_options
from app.devices import DeviceError, choose_engine_device, parse_devices


def test_parse_devices_forms():
    assert parse_devices("auto") == ["auto"]
    assert parse_devices("") == ["auto"]
    assert parse_devices("cpu") == ["cpu"]
    assert parse_devices("CUDA:0") == ["cuda:0"]
    assert parse_devices("cuda:0,1") == ["cuda:0", "cuda:1"]
    assert parse_devices("cuda:0, cuda:2") == ["cuda:0", "cuda:2"]


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "cpu:1", "cuda:0,cuda:0", "cpu,cuda:0", "1"])
def test_parse_devices_rejects(bad):
    with pytest.raises(DeviceError):
        parse_devices(bad)


def test_choose_device_single_and_fallback():
    assert choose_engine_device("cpu", cuda_count=0).device == "cpu"
    one = choose_engine_device("cuda:1", cuda_count=2)
    assert one.device == "cuda:1" and one.message is None
    many = choose_engine_device("cuda:0,1", cuda_count=2)
    assert many.device == "cuda:0" and many.requested == ["cuda:0", "cuda:1"]
    assert "not available" in many.message


def test_choose_device_missing_gpu_is_a_clear_error():
    with pytest.raises(DeviceError, match="no CUDA GPU"):
        choose_engine_device("cuda", cuda_count=0)
    with pytest.raises(DeviceError, match="only 1 CUDA GPU"):
        choose_engine_device("cuda:0,1", cuda_count=1)


def test_auth_flag_and_environment():
    assert parse_credential("alice:pa:ss") == ("alice", "pa:ss")
    for bad in ["alice", ":pw", "alice:"]:
        with pytest.raises(AuthError):
            parse_credential(bad)
    assert collect_auth(None, {"LONGREAD_AUTH": "bob:pw"}) == [("bob", "pw")]
    assert collect_auth(["a:1", "b:2"], {"LONGREAD_AUTH": "bob:pw"}) == [("a", "1"), ("b", "2")]
    assert collect_auth(None, {}) == []


def test_parse_options_end_to_end(capsys):
    options, terminal = parse_options(["--devices", "cpu", "--port", "7999", "--auth", "u:p",
                                       "--max-file-mb", "2.5", "--share"], environ={})
    assert not terminal
    assert (options.device, options.port, options.auth, options.share) == ("cpu", 7999, [("u", "p")], True)
    assert options.max_file_bytes == int(2.5 * 1024 * 1024)
    with pytest.raises(SystemExit):
        parse_options(["--devices", "tpu"], environ={})
    assert "not a device" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_options(["--max-file-mb", "0"], environ={})
