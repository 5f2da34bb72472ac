"""The currencies a price may be given in and the defaults of the prices a command is not told: plain names, so the
options that show them (``--currency``, ``--kwh-price``) are built without the pricing of levels (``pricing.py``)."""

#: The one currency default of every command (sweep, cost, report, recommend): prices are in it unless told.
DEFAULT_CURRENCY = "USD"
#: The currencies a price may be given in: ISO 4217's codes of the currencies in use (2025), which a price is only
#: labelled with (no rate converts one into another). A code not among them is a typo until said otherwise.
CURRENCIES = frozenset("""
AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BRL BSD BTN BWP BYN BZD CAD CDF CHF
CLP CNY COP CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG
HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA
MKD MMK MNT MOP MRU MUR MVR MWK MXN MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD
RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX
USD UYU UZS VES VND VUV WST XAF XCD XCG XOF XPF YER ZAR ZMW ZWG""".split())
#: The electricity price an owned box's power is paid at unless told (per kWh, in the prices' currency): cost and
#: recommend both take it and say so. About a European household's or a US commercial rate.
DEFAULT_KWH_PRICE = 0.30
