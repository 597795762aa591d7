"""Where ``tickwork serve``'s webhook executor may send requests: public addresses only.

Any token holder can enqueue a webhook job, so without a rule the server
would POST wherever a payload says: to its own loopback (``127.0.0.1`` in
all its spellings: ``127.1``, ``2130706433``, ``0x7f000001``,
``[::ffff:127.0.0.1]``, ``localhost``), to its own API with the token in the
payload's headers, to private networks, to cloud metadata services
(``169.254.169.254``), and could read the outcomes as a port scan.

``DestinationPolicy.resolve(host, port)`` resolves the name once and refuses
(``HttpRefused``, nothing sent) unless every address it resolves to is a
public unicast one: not loopback, private, link-local, shared (CGNAT),
multicast, unspecified, reserved or documentation space, also when an IPv4
address hides inside an IPv6 one (mapped, 6to4, Teredo, NAT64). The
transport then connects to exactly the addresses that were checked (the
name is still sent as ``Host`` and as the TLS server name, and the
certificate is checked against it), so a name whose resolution changes
between the check and the connection (DNS rebinding) cannot redirect it.

``allow`` lists what may be reached anyway, for hosts that need internal
targets: IP addresses or networks (``10.0.0.0/8``, ``::1``) and host names
(``hooks.internal``: whatever they resolve to). ``tickwork serve
--webhook-allow ENTRY`` adds one.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence

from tickwork.executors.webhook import HttpRefused, HttpUnreachable

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
#: ``resolver(host, port)``: the addresses ``host`` resolves to, as text.
Resolver = Callable[[str, int], Awaitable[list[str]]]

_HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
                        r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.?")

#: NAT64's well-known prefix: an IPv4 address in its last 32 bits.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def embedded_ipv4(address: IpAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, 6to4, Teredo, NAT64)."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]  # the client's address
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_public(address: IpAddress) -> bool:
    """True for a public unicast address (and for no address that hides another)."""
    inner = embedded_ipv4(address)
    if inner is not None and not is_public(inner):
        return False
    return address.is_global and not address.is_multicast


async def system_resolver(host: str, port: int) -> list[str]:
    """The system's resolution of ``host`` (``getaddrinfo``, TCP), addresses as text."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: dict[str, None] = {}
    for _family, _type, _proto, _name, sockaddr in infos:
        seen.setdefault(str(sockaddr[0]).split("%", 1)[0])
    return list(seen)


class DestinationPolicy:
    """Which destinations the webhook transport may connect to (see the module doc)."""

    def __init__(self, allow: Iterable[str] = (), *, resolver: Resolver | None = None) -> None:
        self.networks: list[IpNetwork] = []
        self.hosts: set[str] = set()
        for entry in allow:
            text = entry.strip()
            if not text:
                raise ValueError("an empty --webhook-allow entry")
            try:
                self.networks.append(ipaddress.ip_network(text.strip("[]"), strict=False))
            except ValueError:
                if not _HOST_NAME.fullmatch(text):
                    raise ValueError(f"--webhook-allow {entry!r}: not an IP address, a "
                                     "network (10.0.0.0/8) or a host name") from None
                self.hosts.add(text.lower().rstrip("."))
        self._resolve = resolver or system_resolver

    def allows(self, address: IpAddress) -> bool:
        return is_public(address) or any(address in network for network in self.networks
                                         if network.version == address.version)

    async def resolve(self, host: str, port: int) -> Sequence[str]:
        """The addresses to connect to for ``host``; ``HttpRefused`` when any of
        them may not be reached, ``HttpUnreachable`` when the name does not resolve."""
        name = host.lower().rstrip(".")
        try:
            literal: IpAddress | None = ipaddress.ip_address(name.strip("[]"))
        except ValueError:
            literal = None
        if literal is not None:
            if not self.allows(literal):
                raise HttpRefused(f"{host} is not a public address; nothing was sent")
            return [str(literal)]
        try:
            found = await self._resolve(host, port)
        except OSError as error:
            raise HttpUnreachable(f"could not resolve {host}: {error}") from error
        if not found:
            raise HttpUnreachable(f"{host} resolves to no address")
        if name in self.hosts:
            return found
        refused = [text for text in found if not self.allows(ipaddress.ip_address(text))]
        if refused:
            raise HttpRefused(f"{host} resolves to {', '.join(refused)}, which is not a "
                              "public address; nothing was sent")
        return found
