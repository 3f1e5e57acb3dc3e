import subprocess
import sys

import etsim.network
from etsim.network import loader, model, models, routing, topology


def test_exported_members_exist():
    for module in (etsim.network, loader, model, models, routing, topology):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"
    assert sorted(etsim.network.__all__) == sorted(set(etsim.network.__all__))


def test_network_layer_does_not_import_upper_layers():
    code = (
        "import sys, etsim.network, etsim.cli.topology; "
        "bad = sorted(m for m in sys.modules if m.startswith(('etsim.chakra', 'etsim.workload', 'etsim.system'))); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
