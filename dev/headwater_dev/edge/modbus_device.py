"""pymodbus's server as a Modbus device, its values set by its owner (a test, a bench).

A device with the four tables (coils, discrete inputs, holding and input registers); the
owner plays the machine: :meth:`ModbusDevice.set` changes registers or bits the next read
returns (through the server's own action hook, so input registers and discrete inputs,
which no Modbus request can write, change too). ``on_request`` sees every request as the
device receives it (function code, first address): when each poll reached the device.
"""

from __future__ import annotations

from collections.abc import Callable

from pymodbus.server import ModbusTcpServer
from pymodbus.simulator import DataType, SimData, SimDevice

_TABLES = {1: "coil", 5: "coil", 15: "coil", 2: "discrete", 3: "holding", 6: "holding",
           16: "holding", 4: "input"}  # fmt: skip


class ModbusDevice:
    """One device (unit 1) on ``port``."""

    def __init__(self, port: int, on_request: Callable[[int, int], None] | None = None) -> None:
        self.port = port
        self._on_request = on_request
        self._next: dict[tuple[str, int], int] = {}
        bits = [SimData(0, count=256, values=False, datatype=DataType.BITS)]
        words = [SimData(0, count=2000, values=0, datatype=DataType.REGISTERS)]
        device = SimDevice(id=1, simdata=(bits, list(bits), words, list(words)), action=self._act)
        self.server = ModbusTcpServer(device, address=("127.0.0.1", port))

    def set(self, table: str, address: int, words: list[int] | list[bool]) -> None:
        """Let the machine put ``words`` (bits for coils and discrete inputs) at ``address``."""
        for i, word in enumerate(words):
            self._next[(table, address + i)] = int(word)

    async def _act(self, function_code: int, start_address: int, request_address: int, _count: int,
                   current: list[int], _set_values: object) -> None:  # fmt: skip
        if self._on_request is not None:
            # start_address is where ``current`` begins (the table's start), not the request's.
            self._on_request(function_code, request_address)
        table = _TABLES.get(function_code, "")
        bits = table in ("coil", "discrete")
        for (t, address), value in list(self._next.items()):
            if t != table:
                continue
            del self._next[(t, address)]
            if bits:  # 16 bits to a word, the lowest first
                word, bit = divmod(address - start_address, 16)
                current[word] = (current[word] & ~(1 << bit)) | (value << bit)
            else:
                current[address - start_address] = value

    async def start(self) -> None:
        """Serve on ``127.0.0.1:port`` in the background."""
        await self.server.serve_forever(background=True)

    async def stop(self) -> None:
        """Stop serving."""
        await self.server.shutdown()
