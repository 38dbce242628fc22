"""Crawlake's built-in sample crawl.

``make run`` processes this small, hand-written WARC file when no real Common
Crawl segment is configured, so that every pipeline stage has visible work to
do on a laptop in seconds:

* ingest / HTTP parsing: a ``warcinfo`` record, ``request`` records, a 301
  redirect, a 404 page and non-HTML payloads (PNG, PDF) that must be skipped;
* main-content extraction: every HTML page is wrapped in a nav menu, a cookie
  banner, a "related" sidebar and a link footer that should be stripped;
* language identification: pages in German, French, Spanish, Russian, Chinese
  and Japanese next to the English ones;
* exact dedup: one article served verbatim at a second URL on another site;
* near dedup (MinHash): lightly edited syndicated copies of another article;
* Gopher quality filtering: keyword stuffing, a link farm, "lorem ipsum"
  lines ending in ellipses, a near-empty page and a symbol-heavy page;
* tokenisation and embedding: what survives is eight English articles on
  distinct topics (plus the foreign pages if the language filter allows them).

Every page, site and person here is fictional, and all hosts use the reserved
``.example`` TLD. The pages are literal data in this module; nothing is
downloaded. ``SAMPLE_PAGES`` describes each page (kind, expected main text,
duplicate relations) so tests and demos can check the pipeline's verdicts.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import html
import http
import io
import os
import pathlib
import re
import struct
import uuid
import zlib
from collections.abc import Iterator

from fastwarc.stream_io import GzipWriter
from fastwarc.warc import WarcRecord, WarcRecordType

__all__ = ["KINDS", "SAMPLE_PAGES", "SamplePage", "write_sample_warc"]

#: Every value ``SamplePage.kind`` can take.
KINDS = (
    "article",  # good English page, should survive every filter
    "foreign",  # good non-English page, for language identification
    "exact_duplicate",  # same main text as ``duplicate_of``
    "near_duplicate",  # lightly edited copy of ``duplicate_of``
    "spam",  # should fail Gopher quality rules
    "binary",  # non-HTML payload, should be skipped before extraction
    "redirect",  # 3xx with a Location header
    "not_found",  # 404 error page
)


@dataclasses.dataclass(frozen=True)
class SamplePage:
    """One HTTP response in the sample crawl.

    ``text`` is the main content as written (title, byline, paragraphs, one
    per line), i.e. what a main-content extractor should recover; it is empty
    where not spelled out (spam, binary and redirect pages).
    """

    url: str
    kind: str
    status: int
    content_type: str  # HTTP Content-Type header value
    body: bytes
    note: str  # what the page is meant to exercise
    text: str = ""
    lang: str | None = None  # ISO 639-1 code of the main text
    duplicate_of: str | None = None  # URL of the original, for duplicates
    location: str | None = None  # Location header, for redirects
    with_request: bool = False  # also emit a WARC request record


# ---------------------------------------------------------------------------
# HTML templating
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Chrome:
    """Site boilerplate wrapped around the main content."""

    site: str
    lang: str
    nav: tuple[str, ...]
    cookie: str
    cookie_button: str
    footer: tuple[str, ...]
    copyright: str
    related_heading: str = ""
    related: tuple[str, ...] = ()


_EN_FOOTER = ("About us", "Contact", "Privacy policy", "Terms of use", "Advertise with us")
_EN_COOKIE = (
    "We use cookies to personalise content and ads and to analyse our traffic. "
    "By clicking Accept all you consent to our use of cookies as described in our cookie policy."
)


def _en_chrome(site: str, *related: str) -> _Chrome:
    return _Chrome(
        site=site,
        lang="en",
        nav=("Home", "Latest", "Guides", "Newsletter", "Subscribe"),
        cookie=_EN_COOKIE,
        cookie_button="Accept all",
        footer=_EN_FOOTER,
        copyright=f"© 2024 {site}. All rights reserved.",
        related_heading="Related reading",
        related=related,
    )


def _slug(label: str) -> str:
    return re.sub(r"\W+", "-", label.lower()).strip("-")


def _html_page(chrome: _Chrome, title: str, byline: str, paragraphs: tuple[str, ...]) -> bytes:
    esc = lambda s: html.escape(s, quote=False)  # noqa: E731
    links = lambda labels: "".join(  # noqa: E731
        f'<li><a href="/{_slug(label)}">{esc(label)}</a></li>' for label in labels
    )
    body = "\n".join(f"<p>{esc(p)}</p>" for p in paragraphs)
    aside = ""
    if chrome.related:
        aside = (
            f'<aside class="sidebar related-posts"><h2>{esc(chrome.related_heading)}</h2>'
            f"<ul>{links(chrome.related)}</ul></aside>\n"
        )
    page = f"""<!DOCTYPE html>
<html lang="{chrome.lang}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)} | {esc(chrome.site)}</title>
<link rel="stylesheet" href="/static/site.css">
<script>window.dataLayer = window.dataLayer || [];</script>
</head>
<body>
<div id="cookie-banner" class="cookie-consent banner" role="dialog">
<p>{esc(chrome.cookie)}</p>
<button type="button">{esc(chrome.cookie_button)}</button>
</div>
<header class="site-header">
<a class="logo" href="/">{esc(chrome.site)}</a>
<nav class="main-nav"><ul>{links(chrome.nav)}</ul></nav>
</header>
<main id="content">
<article class="post">
<h1>{esc(title)}</h1>
<p class="byline">{esc(byline)}</p>
{body}
</article>
{aside}</main>
<footer class="site-footer">
<ul>{links(chrome.footer)}</ul>
<p>{esc(chrome.copyright)}</p>
</footer>
</body>
</html>
"""
    return page.encode("utf-8")


def _main_text(title: str, byline: str, paragraphs: tuple[str, ...]) -> str:
    return "\n".join((title, byline, *paragraphs))


def _article(
    url: str,
    chrome: _Chrome,
    title: str,
    byline: str,
    paragraphs: tuple[str, ...],
    *,
    kind: str = "article",
    note: str,
    duplicate_of: str | None = None,
    with_request: bool = False,
) -> SamplePage:
    return SamplePage(
        url=url,
        kind=kind,
        status=200,
        content_type="text/html; charset=utf-8",
        body=_html_page(chrome, title, byline, paragraphs),
        note=note,
        text=_main_text(title, byline, paragraphs),
        lang=chrome.lang,
        duplicate_of=duplicate_of,
        with_request=with_request,
    )


def _edited(paragraphs: tuple[str, ...], edits: dict[str, str]) -> tuple[str, ...]:
    """Apply ``old -> new`` edits; each ``old`` must occur exactly once (a typo
    here would silently turn a near duplicate into an exact one)."""
    joined = "\n".join(paragraphs)
    for old, new in edits.items():
        if joined.count(old) != 1:
            raise ValueError(f"sample edit target must occur exactly once: {old!r}")
        joined = joined.replace(old, new)
    return tuple(joined.split("\n"))


# ---------------------------------------------------------------------------
# English articles
# ---------------------------------------------------------------------------

_BREAD = (
    "Most home bakers discover sooner or later that time is the cheapest ingredient in the kitchen. "
    "A loaf mixed in the morning and baked before lunch can be perfectly pleasant, but the same flour, "
    "water, salt and yeast left to ferment slowly overnight produces bread with a deeper colour, a more "
    "open crumb and a flavour that lingers long after the last slice.",
    "The reason is mostly chemical. When flour is wetted, enzymes that were dormant in the grain wake up "
    "and begin breaking starch into simple sugars. Yeast feeds on some of those sugars and releases carbon "
    "dioxide, which inflates the dough, along with small amounts of alcohol and organic acids. Given only "
    "an hour or two, the yeast races ahead and the enzymes barely get started. Given twelve hours in a cool "
    "place, the balance shifts: more sugars are freed, more acids accumulate, and the crust caramelises to "
    "a richer brown in the oven.",
    "Slowing things down is easier than it sounds. The simplest method is to use less yeast, perhaps a "
    "quarter of what a quick recipe calls for, and to let the dough rise in the refrigerator. Cold dough is "
    "also firmer and easier to shape, which is a welcome bonus for anyone who has wrestled with a sticky "
    "batch on a warm afternoon. Another approach is a preferment: a small portion of flour and water mixed "
    "with a pinch of yeast the night before, then added to the main dough the next day.",
    "Hydration matters as well. Wetter doughs, with water at seventy percent or more of the flour weight, "
    "ferment faster and produce larger, irregular holes. They can be intimidating at first, but a few sets "
    "of gentle stretches and folds during the first hours will build enough strength that the dough holds "
    "its shape without heavy kneading.",
    "Finally, resist the temptation to slice a loaf straight from the oven. The crumb is still setting as "
    "steam escapes, and cutting too early leaves it gummy. An hour on a wire rack feels like a long wait, "
    "but it is the last bit of patience the bread asks for, and it is always worth it.",
)

_TIDE_POOLS = (
    "A rocky shore at low tide looks quiet from a distance, but every hollow left full of seawater is a "
    "small, crowded neighbourhood. Tide pools are among the easiest places to watch marine life up close, "
    "and a single afternoon spent crouching beside one can teach more about the sea than a shelf of "
    "textbooks.",
    "The first thing to notice is zonation. Pools high on the shore are flooded only briefly each day, so "
    "their residents must tolerate warm water, changing salinity and long hours in the sun. Barnacles and "
    "tough green algae dominate there. Lower down, where the sea returns more often, the pools fill with "
    "red seaweeds, anemones, shore crabs, small fish such as blennies, and the slow grazing snails that "
    "keep the rocks clean of film.",
    "Patience is the most useful tool. When a shadow falls across a pool, crabs tuck themselves into "
    "crevices and fish dart under the weed. Sit still for a few minutes and they return. Look closely at "
    "what seems to be a pebble and it may turn out to be a limpet, clamped so tightly to its home scar that "
    "it fits the rock like a lid. Anemones that look like blobs of red jelly open into delicate crowns of "
    "tentacles once they are submerged again.",
    "Good manners matter on the shore. Turn stones over gently and always put them back the right way up, "
    "because the animals underneath depend on the shade and moisture. Avoid pulling limpets or anemones "
    "from the rock, and never carry creatures away in a bucket for the afternoon; even a few hours in warm, "
    "still water can kill them.",
    "Check the tide tables before setting out, and keep an eye on the water while you explore. The sea "
    "comes back faster than most visitors expect, and the best pools are often on ledges that are cut off "
    "first. Wear shoes with a good grip, since wet weed is slippery, and leave plenty of time to walk back "
    "to dry sand.",
)

_BICYCLE = (
    "A bicycle is one of the most efficient machines ever built, yet many of them spend their lives "
    "squeaking, grinding and losing energy to neglect. The good news is that most of the care a bike needs "
    "takes only a few minutes and a handful of inexpensive tools.",
    "Start with the tyres. Pressure drops slowly over time, and soft tyres make every ride feel like hard "
    "work while also increasing the risk of pinch punctures. The recommended range is printed on the "
    "sidewall, and a floor pump with a gauge turns checking it into a weekly habit rather than a guessing "
    "game.",
    "Next, look at the chain. A dry chain sounds rough and wears the gears quickly, while an over-oiled one "
    "collects grit that acts like grinding paste. Wipe the chain with a clean rag, apply a single drop of "
    "lubricant to each roller while turning the pedals backwards, then wipe off the excess. The oil needs "
    "to be inside the links, not on the outside where it attracts dirt.",
    "Brakes deserve attention too. Squeeze each lever and make sure it stops well before touching the "
    "handlebar. For rim brakes, check that the pads meet the rim squarely and have not worn past their "
    "grooves. For disc brakes, listen for scraping and look for a thin, even gap between the pads and the "
    "rotor. Keep oil well away from braking surfaces, because even a fingerprint of it can reduce stopping "
    "power.",
    "Finally, lift the bike a few centimetres and drop it gently onto its wheels. Anything that rattles is "
    "loose and worth tracking down, whether it is a mudguard bolt, a bottle cage or the headset. Spin each "
    "wheel and watch the gap to the brake pads; a wobble means a spoke may need adjusting. None of this "
    "requires a workshop, and catching small problems early saves money and keeps every ride quiet and "
    "pleasant.",
)

_PRINTING = (
    "Long before Europe had a printing press, craftsmen in East Asia were reproducing texts by carving them "
    "into blocks of wood. A page was cut in reverse, inked, and pressed against paper, and a single block "
    "could produce hundreds of copies. The oldest dated printed book that survives, a copy of the Diamond "
    "Sutra from the year 868, was made this way and is still remarkably legible.",
    "Woodblock printing had an obvious weakness: every new page needed a new carving. In the eleventh "
    "century the Chinese artisan Bi Sheng experimented with individual characters made of baked clay that "
    "could be arranged, printed and then reused. Later printers in China and Korea tried wood and metal "
    "type, and Korean printers produced books with cast bronze type well before similar methods appeared in "
    "Europe. For languages with thousands of characters, however, sorting and storing type was a "
    "formidable task.",
    "Johannes Gutenberg's contribution in Mainz around 1450 was less a single invention than a system. He "
    "combined a hand mould for casting uniform metal letters quickly, an alloy of lead, tin and antimony "
    "that melted at a low temperature and cooled without shrinking, an oil-based ink that clung to metal, "
    "and a screw press adapted from those used for wine and paper. With an alphabet of a few dozen letters, "
    "the approach was efficient enough to spread rapidly.",
    "Within fifty years, presses were operating in more than two hundred European towns. Printed books "
    "became cheaper, spelling and grammar slowly grew more consistent, and scholars could compare identical "
    "copies of a text instead of relying on manuscripts that each contained their own errors. Pamphlets and "
    "broadsheets carried news and argument further and faster than ever before.",
    "The basic method of setting metal type by hand lasted for centuries. Only in the late nineteenth "
    "century did machines such as the Linotype begin casting whole lines at once, and only in the twentieth "
    "did photographic and then digital typesetting finally retire the compositor's case.",
)

_COMPOST = (
    "A well-run compost heap should smell of damp earth, not rotting rubbish. When a bin turns sour or "
    "slimy, the cause is almost always the same: too much wet, green material and not enough air. Fixing "
    "it is usually a matter of balance rather than special equipment.",
    "Gardeners often talk about greens and browns. Greens are fresh, nitrogen-rich materials such as "
    "vegetable peelings, coffee grounds and grass clippings. Browns are dry, carbon-rich materials such as "
    "fallen leaves, shredded cardboard, straw and woody prunings. Microbes need both, and a rough rule is "
    "to add two or three handfuls of browns for every handful of greens. If the heap is wet and smelly, add "
    "browns; if it is dry and nothing seems to happen, add greens and a little water.",
    "Air is the other half of the recipe. The organisms that break down waste quickly and without odour "
    "need oxygen, and a dense, compacted heap soon runs short of it. Turning the pile with a fork every "
    "week or two lets air back in and mixes the outer layers, which stay cooler, into the warm centre. "
    "Mixing in coarse material such as twigs also helps by keeping small channels open.",
    "Size matters more than many people expect. A heap of about one cubic metre holds enough heat to work "
    "quickly, while a small pile loses warmth and decomposes slowly. On the other hand, a tiny balcony bin "
    "can still produce good compost if it is fed little and often and kept moist but not soggy.",
    "Some items are best left out. Meat, fish and dairy attract rats and flies, diseased plants can spread "
    "problems back into the garden, and the seeds of persistent weeds may survive a cool heap. Cooked food "
    "scraps can go into a sealed bokashi bucket instead.",
    "Finished compost is dark, crumbly and pleasant to handle, and it usually takes between six months and "
    "a year. Spread it as a mulch around shrubs or dig it into vegetable beds, and the garden will return "
    "the kitchen's leftovers as healthier soil.",
)

_LIGHTHOUSES = (
    "For most of the last two centuries, the lights that guided ships along dangerous coasts depended on "
    "people who lived beside them. Lighthouse keepers trimmed wicks, polished lenses, wound clockwork and "
    "kept watch through the night, often on rocks so remote that relief boats could not land for weeks at "
    "a time.",
    "The work followed a strict routine. Before sunset the lantern glass was cleaned inside and out, "
    "because salt spray and soot could dim the beam. The light was lit at dusk and had to burn steadily "
    "until dawn, so keepers divided the night into watches. On lights with rotating lenses, a heavy weight "
    "descending through the tower drove the mechanism, and it had to be wound back up every few hours. A "
    "log recorded the weather, passing ships and anything unusual.",
    "The great advance of the nineteenth century was the Fresnel lens, designed by the French physicist "
    "Augustin Fresnel. Instead of one enormous, heavy piece of glass, it used rings of prisms arranged "
    "around the lamp to bend light into a concentrated beam. A good Fresnel lens could be seen more than "
    "twenty nautical miles away, and each lighthouse was given its own pattern of flashes so that sailors "
    "could tell exactly which one they were looking at.",
    "Life on a rock station was cramped and repetitive. Keepers usually served in teams of three, sharing "
    "a few small rooms stacked inside the tower, with curved furniture built to fit the walls. Families "
    "lived at shore stations, where children sometimes rowed to school and gardens were planted in "
    "whatever soil could be carried out. Storms could cut off supplies, and more than one keeper's diary "
    "describes days spent rationing water and coal.",
    "Automation gradually made the role unnecessary. Electric lamps, automatic bulb changers and remote "
    "monitoring meant that by the end of the twentieth century most lighthouses in Europe and North America "
    "no longer needed anyone on site. Many towers still shine, but the keepers' cottages have become "
    "museums, holiday lets and bird observatories, and their logbooks are now read by historians rather "
    "than by inspectors.",
)

_BINOCULARS = (
    "People who want to start exploring the night sky often assume they need a telescope. In fact, an "
    "ordinary pair of binoculars is one of the best first instruments there is. Binoculars are light, "
    "quick to set up, and show a wide patch of sky, which makes it much easier to find your way around "
    "than through the narrow view of a telescope eyepiece.",
    "Models labelled 7x50 or 10x50 are ideal. The first number is the magnification and the second is the "
    "width of each front lens in millimetres. Larger lenses gather more light, revealing faint objects, "
    "while modest magnification keeps the image steady enough to hold by hand. Leaning against a wall or a "
    "car roof helps, and resting the binoculars on a camera tripod helps even more.",
    "The Moon is the obvious first target, but try to look at it when it is not full. Near the first "
    "quarter, sunlight strikes the mountains and craters at a low angle, and the shadows along the boundary "
    "between light and dark make the surface look wonderfully three dimensional. A week or so later the "
    "glare of a full Moon flattens everything out.",
    "After that, sweep slowly along the Milky Way on a dark, moonless evening. What looks like a faint "
    "haze to the naked eye breaks up into countless individual stars. Star clusters such as the Pleiades, "
    "which look like a tiny dipper to the eye, become a sparkling group of dozens of blue-white points. The "
    "Andromeda Galaxy appears as a soft oval glow, and it is worth remembering that the light entering "
    "your eyes left it about two and a half million years ago.",
    "Give your eyes at least twenty minutes to adapt to the dark, and use a red torch to read charts, "
    "because white light will undo that adaptation in seconds. Dress more warmly than seems necessary, "
    "take a flask of something hot, and keep notes of what you see. Within a few evenings the sky starts "
    "to feel less like a random scatter of lights and more like familiar territory.",
)

_PENCIL = (
    "In the middle of the sixteenth century, shepherds in Borrowdale, in the north of England, are said to "
    "have found a deposit of a strange black mineral after a storm uprooted trees. It left dark marks on "
    "everything it touched, and local farmers soon used it to mark their sheep. The substance was "
    "graphite, and the Borrowdale deposit turned out to be unusually pure and solid, so that it could be "
    "sawn into sticks.",
    "At first nobody understood what it was. It was called black lead or plumbago, because people assumed "
    "it was a form of lead, and that mistaken name still survives when we talk about the lead in a pencil. "
    "In reality graphite is a form of carbon, made of stacked sheets of atoms that slide over one another "
    "and leave a thin grey trail on paper.",
    "Pure graphite was valuable enough that the mine was guarded and flooded between working seasons to "
    "discourage theft. Early pencils were simply sticks of it wrapped in string or sheepskin. Later, "
    "craftsmen began fitting the sticks into grooved pieces of wood, producing something close to the "
    "modern design.",
    "The next breakthrough came in France in the 1790s, when war cut off supplies of English graphite. The "
    "engineer Nicolas-Jacques Conté found that powdered graphite of lower quality could be mixed with clay, "
    "shaped into rods and fired in a kiln. By changing the proportion of clay he could make leads that were "
    "harder or softer, which is the origin of the grading system, from hard H pencils to soft B pencils, "
    "still printed on them today.",
    "Factories soon turned the pencil into a cheap, mass-produced object, yet its appeal has lasted through "
    "the age of fountain pens, ballpoints and keyboards. A pencil writes upside down and in freezing cold, "
    "its marks can be erased, and it needs nothing but a knife or a sharpener to keep going.",
)

# ---------------------------------------------------------------------------
# Other languages
# ---------------------------------------------------------------------------

_DE = (
    "Der Schwarzwald gehört zu den beliebtesten Wandergebieten Deutschlands, und das aus gutem Grund. "
    "Dichte Tannenwälder, klare Bäche und weite Ausblicke über das Rheintal wechseln sich auf engem Raum "
    "ab. Wer zum ersten Mal dort unterwegs ist, sollte sich jedoch gut vorbereiten, denn das Wetter in den "
    "Höhenlagen kann schnell umschlagen.",
    "Für eine Tagestour eignen sich vor allem die gut markierten Wege rund um den Feldberg oder entlang "
    "der Wutachschlucht. Die Wegweiser sind zuverlässig, trotzdem lohnt es sich, eine Karte oder eine "
    "Wander-App dabeizuhaben. Festes Schuhwerk ist Pflicht, denn viele Pfade sind steinig und nach Regen "
    "rutschig.",
    "Im Rucksack sollten ausreichend Wasser, eine Regenjacke und etwas Proviant nicht fehlen. Zwar gibt es "
    "unterwegs zahlreiche Hütten und Gasthöfe, in denen man ein Stück Schwarzwälder Kirschtorte oder eine "
    "deftige Vesperplatte genießen kann, doch nicht alle haben unter der Woche geöffnet. Besonders im "
    "Frühjahr und im Spätherbst empfiehlt es sich, die Öffnungszeiten vorher zu prüfen.",
    "Wer früh am Morgen startet, hat die Wege oft fast für sich allein und kann mit etwas Glück Rehe oder "
    "sogar einen Auerhahn beobachten. Bitte bleiben Sie dabei auf den markierten Wegen, um die empfindliche "
    "Natur zu schonen, und nehmen Sie Ihren Abfall wieder mit nach Hause.",
)

_FR = (
    "Dans beaucoup de villes françaises, le marché du samedi matin reste un rendez-vous incontournable. "
    "Dès sept heures, les commerçants installent leurs étals sur la place principale : fruits et légumes de "
    "saison, fromages affinés, poissons tout juste arrivés de la côte, pains de campagne encore tièdes. Les "
    "habitants arrivent peu à peu, un panier au bras, et prennent le temps de discuter avec les producteurs "
    "qu'ils connaissent souvent depuis des années.",
    "Faire son marché, c'est d'abord suivre le rythme des saisons. Au printemps, on trouve les premières "
    "asperges et les fraises ; l'été apporte les tomates, les pêches et les melons ; l'automne est la "
    "saison des champignons, des courges et des pommes. En hiver, les étals sont plus modestes, mais les "
    "poireaux, les choux et les agrumes du sud apportent de la couleur.",
    "Pour profiter au mieux du marché, il vaut mieux arriver tôt, avant la foule, et faire un premier tour "
    "sans rien acheter afin de comparer la qualité et les prix. N'hésitez pas à demander conseil : un "
    "fromager vous dira volontiers quel fromage est à point, et un maraîcher vous expliquera comment "
    "cuisiner un légume que vous ne connaissez pas encore. C'est aussi l'occasion de soutenir l'agriculture "
    "locale et de réduire les emballages.",
)

_ES = (
    "Durante el invierno, muchas plantas de interior sufren más por los cuidados que reciben que por el "
    "frío. La calefacción reseca el ambiente, los días son cortos y la luz que entra por las ventanas es "
    "mucho más débil que en verano. Con unos pocos cambios de rutina, sin embargo, es posible mantenerlas "
    "sanas hasta la primavera.",
    "El error más común es regar demasiado. Como las plantas crecen más despacio en esta época, necesitan "
    "menos agua, y la tierra tarda más en secarse. Antes de regar, conviene introducir un dedo en el "
    "sustrato: si los primeros centímetros todavía están húmedos, es mejor esperar unos días. El exceso de "
    "agua pudre las raíces y favorece la aparición de hongos.",
    "La luz es el otro factor clave. Acercar las macetas a las ventanas orientadas al sur o al oeste ayuda "
    "mucho, aunque hay que evitar que las hojas toquen el cristal frío. También es buena idea girar las "
    "plantas de vez en cuando para que crezcan de forma equilibrada.",
    "Por último, la humedad. Agrupar varias plantas, colocar un plato con guijarros y agua debajo de las "
    "macetas o pulverizar las hojas por la mañana son trucos sencillos que compensan el aire seco de la "
    "calefacción. Y no hace falta abonar: el fertilizante puede esperar hasta que llegue el buen tiempo.",
)

_RU = (
    "В конце мая и в июне в Санкт-Петербурге наступает время белых ночей. Солнце опускается за горизонт "
    "лишь ненадолго, и небо над городом почти не темнеет. В эти недели улицы остаются оживлёнными до самого "
    "утра: люди гуляют по набережным, сидят в уличных кафе и ждут, когда начнут разводить мосты.",
    "Разводка мостов — одно из самых известных зрелищ города. Чтобы пропустить суда по Неве, пролёты "
    "мостов поднимаются по точному расписанию, обычно после часа ночи. Лучше всего смотреть на Дворцовый "
    "мост со стороны Эрмитажа или со Стрелки Васильевского острова. Стоит прийти заранее, потому что летом "
    "на набережных собираются тысячи зрителей.",
    "Тем, кто планирует ночную прогулку, важно помнить, что после разводки попасть с одного берега на "
    "другой становится непросто. Метро закрывается около полуночи, а мосты сводятся только под утро. "
    "Поэтому лучше заранее решить, на каком берегу вы хотите оказаться, или выбрать гостиницу поблизости.",
    "Белые ночи — это ещё и сезон фестивалей, концертов и театральных премьер. Если вы приезжаете в город "
    "в это время, бронируйте жильё и билеты заблаговременно: спрос в июне особенно высок, и лучшие места "
    "быстро заканчиваются.",
)

_ZH = (
    "近年来，越来越多的城市居民开始在阳台上种菜。对于住在高楼里的人来说，一小块种植空间不仅能提供新鲜的蔬菜，"
    "还能让人在忙碌的生活中感受到季节的变化。其实，只要掌握一些基本方法，即使是新手也能收获满满。",
    "首先要选择合适的位置。大多数蔬菜每天需要至少六个小时的日照，因此朝南的阳台最为理想。如果阳台光线不足，"
    "可以选择生菜、菠菜、香菜等比较耐阴的叶菜。",
    "其次是容器和土壤。花盆底部一定要有排水孔，否则积水容易导致烂根。普通的园土在盆中容易板结，"
    "最好使用疏松透气的营养土，也可以加入一些自制的堆肥。",
    "浇水要遵循见干见湿的原则：表层土壤干了再浇，一次浇透。夏天蒸发快，最好在早晨或傍晚浇水，"
    "避免在中午高温时浇水伤害根系。",
    "最后，不要急于求成。从播种到收获往往需要一到两个月，期间要注意观察叶片的颜色和虫害情况。"
    "看着一粒种子慢慢长成餐桌上的一盘菜，这份成就感是超市里买不到的。",
)

_JA = (
    "京都というと晴れた日の観光を思い浮かべる人が多いかもしれませんが、雨の日の京都にも独特の魅力があります。"
    "しっとりと濡れた石畳や苔むした庭は、晴れの日よりも色が深く見え、観光客が少ないぶん、静かに景色を味わうことができます。",
    "特におすすめなのは、苔で有名な寺院や、町家が並ぶ細い路地です。雨粒が苔の上で光り、軒先から落ちるしずくの音が"
    "心を落ち着かせてくれます。歩きやすい靴と大きめの傘を用意すれば、雨の散歩も快適です。",
    "歩き疲れたら、町家を改装した喫茶店でひと休みしましょう。温かい抹茶と和菓子をいただきながら窓の外の雨を眺める時間は、"
    "旅の忘れられない思い出になるはずです。",
)

_CHROME_DE = _Chrome(
    site="Wanderfreunde Süd",
    lang="de",
    nav=("Startseite", "Touren", "Ausrüstung", "Newsletter"),
    cookie="Wir verwenden Cookies, um Inhalte zu personalisieren und die Zugriffe auf unsere Website zu analysieren.",
    cookie_button="Alle akzeptieren",
    footer=("Impressum", "Datenschutz", "Kontakt"),
    copyright="© 2024 Wanderfreunde Süd. Alle Rechte vorbehalten.",
)
_CHROME_FR = _Chrome(
    site="Le Panier du Marché",
    lang="fr",
    nav=("Accueil", "Recettes", "Saisons", "Newsletter"),
    cookie="Nous utilisons des cookies pour améliorer votre expérience et mesurer l'audience de notre site.",
    cookie_button="Tout accepter",
    footer=("Mentions légales", "Confidentialité", "Contact"),
    copyright="© 2024 Le Panier du Marché. Tous droits réservés.",
)
_CHROME_ES = _Chrome(
    site="Hogar Verde",
    lang="es",
    nav=("Inicio", "Plantas", "Consejos", "Boletín"),
    cookie="Utilizamos cookies propias y de terceros para mejorar nuestros servicios y analizar la navegación.",
    cookie_button="Aceptar todas",
    footer=("Aviso legal", "Privacidad", "Contacto"),
    copyright="© 2024 Hogar Verde. Todos los derechos reservados.",
)
_CHROME_RU = _Chrome(
    site="Путевые заметки",
    lang="ru",
    nav=("Главная", "Маршруты", "Города", "Подписка"),
    cookie="Мы используем файлы cookie, чтобы сайт работал лучше. Продолжая просмотр, вы соглашаетесь с этим.",
    cookie_button="Принять",
    footer=("О проекте", "Политика конфиденциальности", "Контакты"),
    copyright="© 2024 Путевые заметки. Все права защищены.",
)
_CHROME_ZH = _Chrome(
    site="绿色生活",
    lang="zh",
    nav=("首页", "园艺", "美食", "订阅"),
    cookie="本网站使用Cookie来改善您的浏览体验。继续浏览即表示您同意我们使用Cookie。",
    cookie_button="同意",
    footer=("关于我们", "隐私政策", "联系我们"),
    copyright="© 2024 绿色生活 版权所有",
)
_CHROME_JA = _Chrome(
    site="旅のしおり",
    lang="ja",
    nav=("ホーム", "国内旅行", "グルメ", "メルマガ"),
    cookie="当サイトではサービス向上のためにCookieを使用しています。",
    cookie_button="同意する",
    footer=("運営者情報", "プライバシーポリシー", "お問い合わせ"),
    copyright="© 2024 旅のしおり",
)

# ---------------------------------------------------------------------------
# Low-quality pages (raw HTML: spam sites rarely have tidy templates)
# ---------------------------------------------------------------------------

_KEYWORDS = "cheap watches best price buy cheap watches online cheap replica watches sale"
_SPAM_KEYWORD_STUFFED = (
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    "<title>Cheap Watches Cheap Watches Best Cheap Watches</title>"
    f"<meta name=\"keywords\" content=\"{_KEYWORDS}\"></head>\n<body><main>\n"
    "<h1>Cheap Watches Best Price Cheap Watches Online</h1>\n"
    + "".join(f"<p>{_KEYWORDS} {_KEYWORDS} cheap watches cheap watches</p>\n" for _ in range(12))
    + "</main></body></html>\n"
)

_CASINO_SITES = (
    "Mega Spin Palace", "Lucky Jackpot Club", "Royal Bonus Casino", "Golden Reels Online",
    "Super Slots Heaven", "Vegas Free Spins", "Instant Win Arena", "Diamond Roulette Hub",
    "Big Bonus Bonanza", "Cash Wheel Casino", "Jackpot Rocket", "Fortune Tiger Slots",
    "Ace High Poker Room", "Wild Cherry Casino", "Turbo Payout Bets", "Crown Royal Spins",
    "Neon Nights Casino", "Win Big Today", "Starlight Slots", "Bonus Hunter Pro",
    "Red Seven Casino", "Magic Reels", "Lightning Jackpots", "High Roller Lounge",
)
# Bullets are typed into paragraphs rather than using <ul>: resiliparse's
# main-content mode drops <ul> blocks entirely, which would leave only the
# title and hide the bullet-line rule behind the word-count rule.
_SPAM_LINK_LIST = (
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    "<title>Top Casino Bonus Links 2024</title></head>\n<body><main>\n"
    "<h1>Top Casino Bonus Links</h1>\n"
    + "".join(
        f'<p>• {name}: claim your free bonus now at '
        f'<a href="https://{_slug(name)}.example/?ref=bonus">{_slug(name)}.example</a></p>\n'
        for name in _CASINO_SITES
    )
    + "</main></body></html>\n"
)

_LOREM_LINES = (
    "Lorem ipsum dolor sit amet consectetur",
    "Sed do eiusmod tempor incididunt ut labore",
    "Ut enim ad minim veniam quis nostrud",
    "Duis aute irure dolor in reprehenderit",
    "Excepteur sint occaecat cupidatat non proident",
    "Nemo enim ipsam voluptatem quia voluptas",
    "Neque porro quisquam est qui dolorem",
    "Quis autem vel eum iure reprehenderit",
    "At vero eos et accusamus et iusto",
    "Nam libero tempore cum soluta nobis",
    "Temporibus autem quibusdam et aut officiis",
    "Itaque earum rerum hic tenetur a sapiente",
)
_SPAM_LOREM = (
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    "<title>Latest posts</title></head>\n<body><main>\n<h1>Latest posts</h1>\n"
    + "".join(f"<p>{line}...</p>\n" for line in _LOREM_LINES)
    + "</main></body></html>\n"
)

_SPAM_TOO_SHORT = (
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    "<title>Coming soon</title></head>\n<body><main>\n<h1>Coming soon</h1>\n"
    "<p>Our new website is under construction. Please check back later!</p>\n"
    "</main></body></html>\n"
)

_SPAM_SYMBOLS = (
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    "<title>### HOT DEALS ###</title></head>\n<body><main>\n<h1>#### HOT DEALS ####</h1>\n"
    + "".join(
        f"<p>### {deal} ### … … #hot #deal #sale #now … ###</p>\n"
        for deal in ("phones", "laptops", "tablets", "headphones", "cameras", "watches", "shoes", "bags")
    )
    + "</main></body></html>\n"
)

# ---------------------------------------------------------------------------
# Non-HTML payloads, built from literal parts so the bytes never depend on
# the local zlib's compressor.
# ---------------------------------------------------------------------------


def _zlib_stored(data: bytes) -> bytes:
    """zlib stream holding ``data`` in one uncompressed (stored) deflate block."""
    size = len(data)
    return (
        b"\x78\x01\x01"
        + struct.pack("<HH", size, size ^ 0xFFFF)
        + data
        + struct.pack(">I", zlib.adler32(data))
    )


def _tiny_png() -> bytes:
    """A valid 2x2 RGB PNG (69 bytes)."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    ihdr = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)  # 2x2, 8-bit RGB
    rows = b"\x00\xe0\x7a\x1f\x1f\x6f\xd0" * 2  # filter byte + two pixels per row
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", _zlib_stored(rows))
        + chunk(b"IEND", b"")
    )


def _tiny_pdf() -> bytes:
    """A valid one-page PDF 1.4 with a single line of text."""
    content = b"BT /F1 18 Tf 72 720 Td (Quarterly newsletter, spring 2024) Tj ET"
    objects = (
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    )
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, obj in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, obj)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _simple_html(title: str, message: str) -> bytes:
    return (
        f"<!DOCTYPE html>\n<html><head><title>{title}</title></head>\n"
        f"<body><h1>{title}</h1>\n<p>{message}</p>\n</body></html>\n"
    ).encode("utf-8")


# ---------------------------------------------------------------------------
# The sample
# ---------------------------------------------------------------------------

_BREAD_URL = "https://kitchen-notes.example/bread/slow-dough"
_COMPOST_URL = "https://green-thumb.example/guides/composting-without-the-smell"
_LIGHTHOUSE_URL = "https://sea-and-stone.example/history/lighthouse-keepers"
_COMPOST_TITLE = "Composting Without the Smell"
_NOT_FOUND_MESSAGE = "Sorry, the page you were looking for does not exist. It may have been moved or deleted."

SAMPLE_PAGES: tuple[SamplePage, ...] = (
    # 1. Good English articles.
    _article(
        _BREAD_URL,
        _en_chrome("Kitchen Notes", "Ten pantry staples", "How to feed a starter", "Knives, sharpened"),
        "Why Slow Dough Makes Better Bread",
        "By Marta Ellison · 4 March 2024",
        _BREAD,
        note="good article; target of the redirect",
        with_request=True,
    ),
    _article(
        "https://shoreline-journal.example/2024/03/reading-a-tide-pool",
        _en_chrome("Shoreline Journal", "Seaweed identification", "Storm beaches", "Gull behaviour"),
        "Reading a Tide Pool at Low Water",
        "By Owen Tregarthen · 11 March 2024",
        _TIDE_POOLS,
        note="good article",
        with_request=True,
    ),
    _article(
        "https://spokes-and-chains.example/maintenance/ten-minutes-a-week",
        _en_chrome("Spokes & Chains", "Fixing a puncture", "Choosing a lock", "Winter riding"),
        "Ten Minutes a Week: Keeping a Bicycle Running Smoothly",
        "By Priya Natarajan · 18 March 2024",
        _BICYCLE,
        note="good article",
    ),
    _article(
        "https://inkwell-history.example/articles/woodblocks-to-movable-type",
        _en_chrome("Inkwell History", "The story of paper", "Early newspapers", "Type foundries"),
        "From Woodblocks to Movable Type: A Short History of Printing",
        "By Henrik Aalto · 25 March 2024",
        _PRINTING,
        note="good article",
    ),
    _article(
        _COMPOST_URL,
        _en_chrome("Green Thumb", "Raised beds", "Leaf mould", "Wormeries explained"),
        _COMPOST_TITLE,
        "By Dana Whitfield · 2 April 2024",
        _COMPOST,
        note="good article; original of the near-duplicate cluster",
    ),
    _article(
        _LIGHTHOUSE_URL,
        _en_chrome("Sea & Stone", "Shipwrecks of the west coast", "Harbour walls", "Tide mills"),
        "The Lonely Work of Lighthouse Keepers",
        "By Callum Reid · 8 April 2024",
        _LIGHTHOUSES,
        note="good article; original of the exact duplicate",
    ),
    _article(
        "https://dark-sky-club.example/beginners/binoculars-first-night",
        _en_chrome("Dark Sky Club", "Reading a star chart", "Meteor showers", "Light pollution"),
        "Your First Night Under the Stars with Binoculars",
        "By Leila Haddad · 15 April 2024",
        _BINOCULARS,
        note="good article",
    ),
    _article(
        "https://desk-and-drawer.example/objects/the-humble-pencil",
        _en_chrome("Desk & Drawer", "A history of the paperclip", "Fountain pens", "Notebook bindings"),
        "The Humble Pencil and the Graphite Mine That Started It",
        "By Thomas Berwick · 22 April 2024",
        _PENCIL,
        note="good article",
    ),
    # 2. Other languages.
    _article(
        "https://wanderfreunde-sued.example/touren/schwarzwald-tagestour",
        _CHROME_DE,
        "Wandern im Schwarzwald: Tipps für eine Tagestour",
        "Von Jonas Brenner · 6. April 2024",
        _DE,
        kind="foreign",
        note="German page for language identification",
    ),
    _article(
        "https://panier-du-marche.example/saisons/le-marche-du-samedi",
        _CHROME_FR,
        "Le marché du samedi matin",
        "Par Camille Roux · 13 avril 2024",
        _FR,
        kind="foreign",
        note="French page for language identification",
    ),
    _article(
        "https://hogar-verde.example/plantas/cuidados-de-invierno",
        _CHROME_ES,
        "Cómo cuidar las plantas de interior en invierno",
        "Por Lucía Herrera · 20 de abril de 2024",
        _ES,
        kind="foreign",
        note="Spanish page for language identification",
    ),
    _article(
        "https://putevye-zametki.example/goroda/belye-nochi",
        _CHROME_RU,
        "Белые ночи в Санкт-Петербурге",
        "Автор: Анна Соколова · 27 апреля 2024",
        _RU,
        kind="foreign",
        note="Russian (Cyrillic) page for language identification",
    ),
    _article(
        "https://lvse-shenghuo.example/yuanyi/yangtai-caiyuan",
        _CHROME_ZH,
        "城市里的阳台小菜园",
        "作者：王晓梅 · 2024年5月1日",
        _ZH,
        kind="foreign",
        note="Chinese (simplified) page; no spaces between words",
    ),
    _article(
        "https://tabi-no-shiori.example/kyoto/ame-no-hi",
        _CHROME_JA,
        "雨の日の京都を歩く",
        "文・佐藤美咲 · 2024年5月3日",
        _JA,
        kind="foreign",
        note="Japanese page; mixed kana and kanji",
    ),
    # 3. Exact duplicate: same article, different site chrome.
    _article(
        "https://coastal-digest.example/archive/2024/lighthouse-keepers",
        dataclasses.replace(
            _en_chrome("Coastal Digest", "Puffin colonies", "Sea kayaking basics"),
            nav=("Front page", "Archive", "Maps", "Shop", "Donate"),
            cookie="This site stores cookies on your device to remember your preferences. Manage settings.",
            cookie_button="OK",
            footer=("Masthead", "Syndication", "Cookie settings", "Accessibility"),
        ),
        "The Lonely Work of Lighthouse Keepers",
        "By Callum Reid · 8 April 2024",
        _LIGHTHOUSES,
        kind="exact_duplicate",
        note="verbatim copy of the lighthouse article on another site",
        duplicate_of=_LIGHTHOUSE_URL,
    ),
    # 4. Near duplicates: syndicated copies with small edits.
    _article(
        "https://allotment-news.example/2024/04/composting-without-the-smell",
        _en_chrome("Allotment News", "Seed swaps", "Growing garlic"),
        _COMPOST_TITLE,
        "By Dana Whitfield · Updated 16 April 2024",
        _edited(
            _COMPOST,
            {"every week or two": "every fortnight or so", "rats and flies": "rodents and flies"},
        ),
        kind="near_duplicate",
        note="near duplicate: new date line, two small wording changes",
        duplicate_of=_COMPOST_URL,
    ),
    _article(
        "https://garden-digest.example/syndicated/compost-without-smell",
        _en_chrome("Garden Digest", "Pruning roses", "Lawn care"),
        _COMPOST_TITLE,
        "By Dana Whitfield · Garden Digest, 23 April 2024",
        _edited(
            _COMPOST,
            {
                "Size matters more than many people expect.": (
                    "The size of the heap is more important than most beginners realise."
                ),
            },
        ),
        kind="near_duplicate",
        note="near duplicate: new date line, one rewritten sentence",
        duplicate_of=_COMPOST_URL,
    ),
    # 5. Low-quality pages for the Gopher rules.
    SamplePage(
        url="https://best-cheap-watches.example/cheap-watches",
        kind="spam",
        status=200,
        content_type="text/html; charset=utf-8",
        body=_SPAM_KEYWORD_STUFFED.encode("utf-8"),
        note="keyword stuffing: duplicate lines and a dominant 2-gram",
        lang="en",
    ),
    SamplePage(
        url="https://casino-bonus-links.example/top-links",
        kind="spam",
        status=200,
        content_type="text/html; charset=utf-8",
        body=_SPAM_LINK_LIST.encode("utf-8"),
        note="link farm: almost every line is a bullet point",
        lang="en",
    ),
    SamplePage(
        url="https://placeholder-blog.example/latest",
        kind="spam",
        status=200,
        content_type="text/html; charset=utf-8",
        body=_SPAM_LOREM.encode("utf-8"),
        note="lorem ipsum teasers: most lines end with an ellipsis, no stop words",
        lang="la",
    ),
    SamplePage(
        url="https://under-construction.example/",
        kind="spam",
        status=200,
        content_type="text/html; charset=utf-8",
        body=_SPAM_TOO_SHORT.encode("utf-8"),
        note="too short: fewer than 50 words",
        lang="en",
    ),
    SamplePage(
        url="https://hot-deals-now.example/deals",
        kind="spam",
        status=200,
        content_type="text/html; charset=utf-8",
        body=_SPAM_SYMBOLS.encode("utf-8"),
        note="symbol-heavy: '#' and '…' outnumber one in ten words",
        lang="en",
    ),
    # 6. Non-HTML payloads.
    SamplePage(
        url="https://kitchen-notes.example/images/crumb.png",
        kind="binary",
        status=200,
        content_type="image/png",
        body=_tiny_png(),
        note="image: must be skipped before HTML extraction",
    ),
    SamplePage(
        url="https://green-thumb.example/files/newsletter-spring-2024.pdf",
        kind="binary",
        status=200,
        content_type="application/pdf",
        body=_tiny_pdf(),
        note="PDF: must be skipped before HTML extraction",
    ),
    # 7. Redirect and 8. error page.
    SamplePage(
        url="http://kitchen-notes.example/bread/slow-dough",
        kind="redirect",
        status=301,
        content_type="text/html; charset=utf-8",
        body=_simple_html(
            "301 Moved Permanently",
            f'The document has moved <a href="{_BREAD_URL}">here</a>.',
        ),
        note="HTTP to HTTPS redirect: no document, Location points at the bread article",
        location=_BREAD_URL,
        with_request=True,
    ),
    SamplePage(
        url="https://kitchen-notes.example/bread/rye-starter",
        kind="not_found",
        status=404,
        content_type="text/html; charset=utf-8",
        body=_simple_html("404 Not Found", _NOT_FOUND_MESSAGE),
        note="error page: must be dropped by status even though it has text",
        text="404 Not Found\n" + _NOT_FOUND_MESSAGE,
        lang="en",
    ),
)

# ---------------------------------------------------------------------------
# WARC writing
# ---------------------------------------------------------------------------

# Fixed crawl clock: record i is fetched _CRAWL_START + i * _CRAWL_STEP.
_CRAWL_START = dt.datetime(2024, 5, 6, 8, 0, 0, tzinfo=dt.timezone.utc)
_CRAWL_STEP = dt.timedelta(seconds=7)
_USER_AGENT = "crawlake-sample/1.0 (+https://crawlake.example/bot)"

_WARCINFO = (
    b"software: crawlake pipelines.sample\r\n"
    b"format: WARC File Format 1.1\r\n"
    b"conformsTo: https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/\r\n"
    b"isPartOf: crawlake-sample\r\n"
    b"description: Synthetic sample crawl bundled with crawlake; every site and page is fictional.\r\n"
    b"operator: crawlake\r\n"
)


def _record_urn(name: str) -> bytes:
    # Deterministic IDs: uuid5 of the URL for responses (prefixed for other types).
    return f"uuid:{uuid.uuid5(uuid.NAMESPACE_URL, name)}".encode("ascii")


def _http_response(page: SamplePage, when: dt.datetime) -> bytes:
    status = http.HTTPStatus(page.status)
    headers = [
        ("Date", when.strftime("%a, %d %b %Y %H:%M:%S GMT")),
        ("Server", "nginx"),
        ("Content-Type", page.content_type),
        ("Content-Length", str(len(page.body))),
    ]
    if page.location is not None:
        headers.append(("Location", page.location))
    headers.append(("Connection", "close"))
    head = f"HTTP/1.1 {status.value} {status.phrase}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    return head.encode("latin-1") + b"\r\n" + page.body


def _http_request(url: str) -> bytes:
    host, _, path = url.partition("://")[2].partition("/")
    return (
        f"GET /{path} HTTP/1.1\r\n"
        f"Host: {host}\r\n"
        f"User-Agent: {_USER_AGENT}\r\n"
        "Accept: text/html,application/xhtml+xml,*/*;q=0.8\r\n"
        "Accept-Encoding: identity\r\n"
        "\r\n"
    ).encode("ascii")


def _warc_date(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _records() -> Iterator[tuple[WarcRecord, bytes | None]]:
    """Yield ``(record, payload SHA-1 or None)`` in file order.

    Records are built fresh on every call because writing one consumes it.
    fastwarc only computes the block digest itself, so the payload digest (of
    the HTTP body after the header block) is passed alongside.
    """
    info = WarcRecord()
    info.init_headers(WarcRecordType.warcinfo, _record_urn("urn:crawlake:sample:warcinfo"))
    info.set_bytes_content(_WARCINFO)
    info.headers["WARC-Date"] = _warc_date(_CRAWL_START)
    info.headers["Content-Type"] = "application/warc-fields"
    yield info, None

    for i, page in enumerate(SAMPLE_PAGES, start=1):
        when = _CRAWL_START + i * _CRAWL_STEP
        response_id = _record_urn(page.url)
        if page.with_request:
            req = WarcRecord()
            req.init_headers(WarcRecordType.request, _record_urn("request:" + page.url))
            req.set_bytes_content(_http_request(page.url))
            req.is_http = True  # sets Content-Type: application/http; msgtype=request
            req.headers["WARC-Date"] = _warc_date(when)
            req.headers["WARC-Target-URI"] = page.url
            req.headers["WARC-Concurrent-To"] = f"<urn:{response_id.decode()}>"
            yield req, None
        resp = WarcRecord()
        resp.init_headers(WarcRecordType.response, response_id)
        resp.set_bytes_content(_http_response(page, when))
        resp.is_http = True  # sets Content-Type: application/http; msgtype=response
        resp.headers["WARC-Date"] = _warc_date(when)
        resp.headers["WARC-Target-URI"] = page.url
        yield resp, hashlib.sha1(page.body).digest()


def write_sample_warc(path: str | os.PathLike) -> pathlib.Path:
    """Write crawlake's built-in sample crawl to ``path`` and return it as a Path.

    The file is a WARC/1.1 ``.warc.gz`` (CRLF line endings, one gzip member
    per record, about 40 KiB) holding a ``warcinfo`` record followed by one
    ``response`` record per entry of ``SAMPLE_PAGES``, in order, each with
    ``WARC-Block-Digest`` and ``WARC-Payload-Digest`` (SHA-1); pages with
    ``with_request`` are preceded by their ``request`` record. Output is
    deterministic: fixed ``WARC-Date`` values, ``WARC-Record-ID`` from
    ``uuid.uuid5`` of the URL, gzip header mtime 0, so every call writes the
    same bytes (for a given fastwarc/zlib build). An existing file at
    ``path`` is overwritten.

    :param path: destination file name; the parent directory must exist
    :return: ``pathlib.Path(path)``
    :raise OSError: if the file cannot be written (e.g. missing directory)
    """
    out = pathlib.Path(path)
    buf = io.BytesIO()
    writer = GzipWriter(buf)
    for record, payload_digest in _records():
        record.write(writer, checksum_data=True, payload_digest=payload_digest)
        writer.finish()  # close the gzip member so each record is its own member
    writer.close()
    out.write_bytes(buf.getvalue())
    return out
