"""A Prometheus page of the server host (``--power-url``): NVIDIA's DCGM exporter or the node exporter.

Read in order, the first the page has:
- DCGM ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``: each GPU's energy counter in millijoules (GPU boards);
- DCGM ``DCGM_FI_DEV_POWER_USAGE``: each GPU's power now in watts, sampled;
- node exporter ``node_rapl_package_joules_total`` (plus ``node_rapl_dram_joules_total``): RAPL counters in joules;
- node exporter ``node_hwmon_power_average_watt``: every hwmon power sensor in watts (an amdgpu APU's is the whole
  package).
Label sets (GPUs, zones, chips) are summed, as ``prometheus.parse`` reads a page. The node exporter passes RAPL's
counters on as they are, wrap included, with no range: a counter that goes back is taken as a reset and the figure
is marked partial."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from urllib.parse import unquote, urlsplit, urlunsplit

from .. import redact
from ..prometheus import parse
from .base import PowerError, PowerSource, Scope

MAX_PAGE_BYTES = 16 << 20


#: (metric names as ``prometheus.parse`` gives them, unit factor to watts or joules, counter, measures, note)
METRICS: list[tuple[tuple[str, ...], float, bool, Scope, str]] = [
    (("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total"), 1e-3, True,
     Scope.GPU_BOARD, "DCGM exporter: GPU boards' energy counters"),
    (("DCGM_FI_DEV_POWER_USAGE",), 1.0, False, Scope.GPU_BOARD, "DCGM exporter: GPU boards' power, sampled"),
    (("node_rapl_package_joules_total",), 1.0, True, Scope.CPU_PACKAGE,
     "node exporter: RAPL package counters (with DRAM where reported)"),
    (("node_hwmon_power_average_watt",), 1.0, False, Scope.APU_PACKAGE,
     "node exporter: hwmon power sensors, sampled (an amdgpu APU's reads the whole package)"),
]
DRAM = "node_rapl_dram_joules_total"


def fetch(url: str, timeout_s: float) -> str:
    """The page's text; a PowerError in one line when it cannot be had."""
    shown = redact.url(url)
    try:
        with urllib.request.urlopen(_request(url), timeout=timeout_s) as r:  # noqa: S310 - the user's own http(s) URL
            return bytes(r.read(MAX_PAGE_BYTES)).decode("utf-8", errors="replace")
    except urllib.error.HTTPError as e:
        raise PowerError(f"url: {shown} answered HTTP {e.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        raise PowerError(f"url: cannot read {shown} ({reason})") from None


def _request(url: str) -> urllib.request.Request:
    """The page's request: a URL's user and password (an exporter behind HTTP Basic auth) sent as its header, as
    curl sends them; urllib would take them for part of the host name."""
    parts = urlsplit(url)
    if parts.username is None:
        return urllib.request.Request(url)
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
    creds = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    return urllib.request.Request(urlunsplit(parts._replace(netloc=netloc)),
                                  headers={"Authorization": "Basic " + base64.b64encode(creds).decode()})


class UrlSource(PowerSource):
    """The first power metric of ``METRICS`` that the page at ``url`` has."""

    name = "url"

    def __init__(self, url: str, timeout_s: float = 3.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise PowerError(f"url: {redact.url(url)} is not an http:// or https:// URL: give --power-url one")
        self.url, self.timeout_s = url, timeout_s
        sample = self._page()
        for names, factor, counter, measures, note in METRICS:
            metric = next((n for n in names if n in sample), None)
            if metric is not None:
                self.metric, self.factor, self.counter, self.measures = metric, factor, counter, measures
                self.note = f"{note}, from {redact.url(url)}"
                return
        raise PowerError(f"url: {redact.url(url)} has no power metric (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, "
                         "DCGM_FI_DEV_POWER_USAGE, node_rapl_package_joules_total, node_hwmon_power_average_watt)")

    def _page(self) -> dict[str, float]:
        text = fetch(self.url, self.timeout_s)
        try:
            return parse(text)
        except ValueError as e:
            raise PowerError(f"url: {redact.url(self.url)} is not a Prometheus page ({e})") from None

    def sample(self) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        page = self._page()
        if self.metric not in page:
            raise PowerError(f"url: {redact.url(self.url)} no longer has {self.metric}")
        value = page[self.metric] * self.factor
        if not self.counter:
            return {self.metric: value}, {}, {}
        joules = {self.metric: value}
        if self.metric.startswith("node_rapl") and DRAM in page:
            joules[DRAM] = page[DRAM]
        return {}, joules, {}
