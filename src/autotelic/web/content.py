"""Seed content of the local web sites: the one source of truth for the databases and the task generators.

Every name is distinct within its kind and every text carries a concrete fact (a colour, a number, a
year, a name), so a task can ask about it and check the answer against these tuples.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Product:
    id: int
    name: str
    category: str
    price: float
    stock: int
    description: str


@dataclass(frozen=True)
class Thread:
    id: int
    title: str
    author: str
    body: str


@dataclass(frozen=True)
class Post:
    id: int
    thread_id: int
    author: str
    body: str


@dataclass(frozen=True)
class Article:
    slug: str
    title: str
    body: str


@dataclass(frozen=True)
class Venue:
    id: int
    name: str
    city: str


CATEGORIES = ("kitchen", "garden", "office")

PRODUCTS = (
    Product(1, "Blue Mug", "kitchen", 8.50, 14, "A blue ceramic mug that holds 350 ml."),
    Product(2, "Steel Kettle", "kitchen", 34.99, 6, "A steel kettle with a capacity of 1.7 litres."),
    Product(3, "Oak Board", "kitchen", 22.00, 9, "A cutting board made of solid oak."),
    Product(4, "Glass Jar", "kitchen", 5.25, 30, "A clear glass jar that holds 500 ml."),
    Product(5, "Green Hose", "garden", 19.90, 11, "A green rubber hose that is 15 metres long."),
    Product(6, "Clay Pot", "garden", 12.40, 25, "A red clay pot that is 20 cm wide."),
    Product(7, "Iron Rake", "garden", 27.75, 7, "A rake with an iron head and 12 teeth."),
    Product(8, "Cedar Bench", "garden", 149.00, 3, "A bench made of cedar wood that seats 2 people."),
    Product(9, "Black Pen", "office", 2.30, 120, "A pen with black ink and a metal clip."),
    Product(10, "Paper Ream", "office", 6.99, 40, "A ream of 500 white paper sheets."),
    Product(11, "Desk Lamp", "office", 41.50, 8, "A yellow desk lamp with a 40 cm arm."),
    Product(12, "Cork Board", "office", 15.80, 12, "A cork board that measures 60 by 40 cm."),
)

THREADS = (
    Thread(1, "Best soil for tomatoes", "Alice", "My tomatoes grow slowly. Which soil do you use?"),
    Thread(2, "Kettle stopped working", "Dana", "My kettle stopped heating after 2 years. Any fix?"),
    Thread(3, "Favourite pen for notes", "Farah", "I need a pen that does not smudge."),
    Thread(4, "Weekend hiking trip", "Jonas", "Who wants to hike the north ridge on Saturday?"),
    Thread(5, "Book club picks", "Leo", "This month we read a mystery novel. Suggest the next book."),
    Thread(6, "Lost cat near the park", "Omar", "My grey cat went missing on Friday near the park."),
)

POSTS = (
    Post(1, 1, "Bruno", "I mix compost into sandy soil."),
    Post(2, 1, "Chen", "Water them every morning too."),
    Post(3, 2, "Emeka", "Check the fuse in the plug first."),
    Post(4, 3, "Gus", "The Black Pen from the shop works well."),
    Post(5, 3, "Hana", "Gel pens smudge less for me."),
    Post(6, 3, "Ivan", "I only write with a pencil."),
    Post(7, 4, "Kira", "I can join at 8 in the morning."),
    Post(8, 5, "Mira", "A sea adventure would be fun."),
    Post(9, 5, "Nadia", "Something short, please."),
    Post(10, 6, "Pia", "I saw a grey cat by the bakery on Main Street."),
)

ARTICLES = (
    Article("eldmark", "Eldmark", "Eldmark is a small country with 3 provinces. It was founded in 1802. Its "
            "capital is Brisa."),
    Article("brisa", "Brisa", "Brisa is the capital of Eldmark and has 240000 people. Its city hall was designed by "
            "Tomas Veil in 1910."),
    Article("lake-varden", "Lake Varden", "Lake Varden is 42 metres deep. The first bridge over it was built in "
            "1871 by Ada Korr."),
    Article("mount-tarn", "Mount Tarn", "Mount Tarn is the highest mountain in Eldmark at 2810 metres. It was "
            "first climbed in 1889 by Piet Ovan."),
    Article("glimmerfruit", "Glimmerfruit", "Glimmerfruit is an orange fruit that grows on Mount Tarn. One tree "
            "gives about 60 fruits a year. Lena Holt first described it in 1934."),
    Article("skyrail", "Skyrail", "The Skyrail is a cable car in Brisa that opened in 1998. It has 24 cabins and "
            "is 3 km long."),
    Article("copper-owl", "Copper Owl", "The Copper Owl is a statue in the harbour of Brisa. Mara Fenn made it in "
            "1765. It is 4 metres tall."),
    Article("varden-festival", "Varden Festival", "The Varden Festival is held every July at Lake Varden. It "
            "started in 1956 and has 12 boat races."),
)

VENUES = (
    Venue(1, "Olive Table", "Brisa"),
    Venue(2, "Harbour Grill", "Port Lune"),
    Venue(3, "Sakura House", "Brisa"),
    Venue(4, "Fern Cafe", "Tarnby"),
)

BOOKING_DATES = ("2026-12-04", "2026-12-11", "2026-12-18", "2026-12-24")
BOOKING_TIMES = ("18:00", "19:00", "20:00", "21:00")
PARTY_SIZES = tuple(range(1, 9))
