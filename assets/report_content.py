"""Text of the fictional annual report rendered into assets/sample_report.pdf.

Each entry of PAGES is one page: a heading and blocks. A block is a paragraph string, or a
list of rows (a table, rendered in a monospaced font). All names and figures are invented;
they are consistent across pages so questions about the document have checkable answers.
"""

TITLE = "Halvorsen Tidal Energy ASA - Annual Report 2024"

PAGES = [
    ("Halvorsen Tidal Energy ASA", [
        "Annual Report 2024",
        "Registered office: Strandkaien 14, 6004 Alesund, Norway. Organisation number 921 448 307.",
        "Halvorsen Tidal Energy designs, builds and operates tidal-stream turbines in the fjords and "
        "sounds of western Norway and, since 2023, in the Pentland Firth in Scotland. At the end of "
        "2024 the company operated 38 turbines with a combined installed capacity of 71.4 megawatts.",
        "Contents: 1 Letter from the chief executive. 2 Highlights of the year. 3 Operations. "
        "4 Financial review. 5 Segment results. 6 Risk factors. 7 Sustainability. 8 Outlook for 2025. "
        "9 Corporate governance. 10 Glossary.",
    ]),
    ("1. Letter from the chief executive", [
        "Dear shareholders, 2024 was the year in which tidal power stopped being an experiment for us "
        "and became a business. Revenue grew by 31 percent to NOK 412.6 million, and for the first "
        "time in the company's eleven-year history we reported a positive operating result.",
        "The most important event of the year was the commissioning of the Sulafjord array in "
        "September: twelve turbines of our third-generation HT-3 design, each rated at 2.2 megawatts. "
        "The array was delivered six weeks ahead of schedule and 4 percent under its budget of "
        "NOK 640 million.",
        "Not everything went to plan. A gearbox defect in the older HT-2 fleet forced us to take nine "
        "turbines out of service for an average of 23 days in the spring. We have since replaced the "
        "affected bearings on all HT-2 units and extended the supplier warranty to 2029.",
        "I want to thank our 286 employees for their work in sometimes very demanding conditions at sea. "
        "- Ingrid Halvorsen, Chief Executive Officer, 6 March 2025",
    ]),
    ("2. Highlights of the year", [
        "Revenue: NOK 412.6 million (2023: NOK 315.0 million), an increase of 31 percent.",
        "Operating result (EBIT): NOK 18.9 million (2023: a loss of NOK 42.7 million).",
        "Electricity delivered: 198.4 gigawatt-hours (2023: 151.2 gigawatt-hours).",
        "Fleet availability: 94.1 percent (2023: 95.6 percent), reduced by the HT-2 gearbox campaign.",
        "Installed capacity at year end: 71.4 megawatts in 38 turbines.",
        "Order backlog for turbine sales to third parties: NOK 1.18 billion, of which NOK 730 million "
        "relates to the Orkney Sound project for Caledonia Marine Power.",
        "Lost-time injury frequency: 1.9 per million hours worked (2023: 3.4).",
        "Proposed dividend: none. The board proposes to retain all earnings to finance the Pentland "
        "expansion.",
    ]),
    ("3. Operations", [
        "The company operates three arrays. Sulafjord (Norway) has 12 HT-3 turbines and 26.4 megawatts. "
        "Breisundet (Norway) has 18 HT-2 turbines and 28.8 megawatts. Pentland West (Scotland) has "
        "8 HT-2 turbines and 16.2 megawatts.",
        "Capacity factor averaged 31.7 percent across the fleet. Sulafjord reached 38.2 percent in its "
        "first full quarter, the best result we have recorded, which we attribute to the variable-pitch "
        "blades introduced with HT-3.",
        "Maintenance is carried out from two service vessels, MS Tidvatn and MS Straumen. In October "
        "we signed a charter for a third vessel, to be based in Scrabster from April 2025.",
        "Production by array in gigawatt-hours:",
        [["Array", "Turbines", "MW", "GWh 2024", "GWh 2023"],
         ["Sulafjord", "12", "26.4", "24.9", "-"],
         ["Breisundet", "18", "28.8", "112.6", "108.3"],
         ["Pentland West", "8", "16.2", "60.9", "42.9"],
         ["Total", "38", "71.4", "198.4", "151.2"]],
    ]),
    ("4. Financial review", [
        "Revenue consists of electricity sales under fixed-price contracts (NOK 301.2 million), "
        "turbine sales to third parties (NOK 88.5 million) and service income (NOK 22.9 million).",
        "Operating expenses rose by 9 percent to NOK 393.7 million. The largest item was maintenance "
        "at NOK 121.4 million, including NOK 17.8 million for the HT-2 gearbox campaign.",
        "Net financial expenses were NOK 26.3 million, mainly interest on the green bond issued in "
        "2022 (NOK 500 million at a fixed coupon of 5.25 percent, maturing in 2027). The result "
        "before tax was a loss of NOK 7.4 million.",
        "Key figures in NOK million:",
        [["Item", "2024", "2023", "Change"],
         ["Revenue", "412.6", "315.0", "+31%"],
         ["Operating expenses", "393.7", "357.7", "+10%"],
         ["EBIT", "18.9", "-42.7", "n/a"],
         ["Net financial items", "-26.3", "-24.1", "n/a"],
         ["Result before tax", "-7.4", "-66.8", "n/a"],
         ["Cash at year end", "264.0", "198.5", "+33%"]],
        "Cash flow from operations was NOK 96.2 million. Investments of NOK 614.3 million were "
        "financed by operating cash flow, the NOK 450 million share issue in May and drawings on "
        "the construction facility.",
    ]),
    ("5. Segment results", [
        "Generation: revenue NOK 301.2 million and EBIT NOK 41.5 million. The segment comprises the "
        "three arrays owned by the company.",
        "Turbine sales: revenue NOK 88.5 million and EBIT of minus NOK 14.1 million. Two HT-3 units "
        "were delivered to the Faroe Islands utility SEV; the loss reflects start-up costs of the "
        "new assembly hall in Ulsteinvik.",
        "Services: revenue NOK 22.9 million and EBIT of minus NOK 8.5 million. We operate and maintain "
        "four third-party turbines under five-year contracts.",
        "Employees by segment at 31 December 2024: Generation 118, Turbine sales 121, Services 31, "
        "Group functions 16, total 286.",
    ]),
    ("6. Risk factors", [
        "Technology risk: tidal turbines operate in a harsh environment. Component failures such as "
        "the HT-2 gearbox defect can cause long outages because repairs depend on weather windows.",
        "Market risk: 73 percent of electricity sales are under fixed-price contracts running until "
        "2031. The remaining volume is sold at spot prices in price area NO3 and in the United Kingdom.",
        "Financing risk: the green bond of NOK 500 million matures in 2027. The board expects to "
        "refinance it in 2026.",
        "Regulatory risk: the Scottish contract-for-difference award of 2023 guarantees a strike price "
        "of GBP 198 per megawatt-hour for Pentland West until 2038, indexed to inflation.",
        "Currency risk: about 29 percent of revenue is in British pounds. The company hedges 60 percent "
        "of expected net pound flows twelve months ahead.",
    ]),
    ("7. Sustainability", [
        "Tidal power is predictable and emits no greenhouse gases in operation. Our life-cycle analysis, "
        "verified by DNV in 2024, puts emissions at 14 grams of CO2 equivalent per kilowatt-hour.",
        "Marine life: acoustic monitoring at Breisundet recorded 1,412 harbour porpoise detections in "
        "2024 with no confirmed collisions. Turbines stop automatically when marine mammals are "
        "detected within 80 metres.",
        "People: women made up 24 percent of the workforce and 38 percent of managers. Sick leave was "
        "4.2 percent. The lost-time injury frequency fell to 1.9.",
        "Circularity: 91 percent of the HT-2 blade material replaced in 2024 was recycled into "
        "construction panels by our partner Fibre Loop AS.",
    ]),
    ("8. Outlook for 2025", [
        "We expect electricity deliveries of 245 to 260 gigawatt-hours in 2025, helped by the first "
        "full year of the Sulafjord array.",
        "Construction of Pentland East, ten HT-3 turbines with 22 megawatts, starts in June 2025 with "
        "first power expected in the third quarter of 2026. The investment is estimated at "
        "NOK 1.05 billion.",
        "Revenue guidance for 2025 is NOK 480 to 520 million. The board does not expect to pay a "
        "dividend before 2027.",
    ]),
    ("9. Corporate governance", [
        "The board has five members: Tor Eikrem (chair), Ingeborg Lunde, Martin Skaar, Fiona "
        "MacLeod and Per Aasen. Two members are elected by employees.",
        "The board met eleven times in 2024. The audit committee, chaired by Ingeborg Lunde, met "
        "six times. The auditor is Fjord Revisjon AS.",
        "Remuneration: the chief executive received a fixed salary of NOK 3.1 million and a bonus of "
        "NOK 0.4 million. No options were granted in 2024.",
    ]),
    ("10. Glossary", [
        "Capacity factor: energy actually produced divided by the energy the turbines would produce "
        "at full rated power all year.",
        "EBIT: earnings before interest and tax, the operating result.",
        "HT-2, HT-3: the company's second and third turbine generations; HT-3 has variable-pitch blades.",
        "Availability: the share of hours in which a turbine was able to produce, whether or not the "
        "tide was running.",
    ]),
]
