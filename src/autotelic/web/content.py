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
    Product(13, "Tea Towel", "kitchen", 4.75, 45, "A cotton tea towel with 3 white stripes."),
    Product(14, "Bread Knife", "kitchen", 17.60, 10, "A bread knife with a 21 cm serrated blade."),
    Product(15, "Salad Bowl", "kitchen", 13.20, 16, "A wooden salad bowl that is 28 cm wide."),
    Product(16, "Copper Pan", "kitchen", 46.00, 5, "A copper frying pan with a 24 cm base."),
    Product(17, "Watering Can", "garden", 14.95, 18, "A grey metal watering can that holds 9 litres."),
    Product(18, "Seed Tray", "garden", 3.60, 50, "A plastic seed tray with 24 cells."),
    Product(19, "Bird Feeder", "garden", 21.30, 9, "A pine bird feeder with a roof and 4 perches."),
    Product(20, "Pruning Shears", "garden", 16.45, 13, "Pruning shears with red handles that cut stems 2 cm thick."),
    Product(21, "Metal Stapler", "office", 9.80, 22, "A metal stapler that binds up to 25 sheets."),
    Product(22, "Sticky Notes", "office", 3.15, 80, "A pad of 100 yellow sticky notes."),
    Product(23, "Swivel Chair", "office", 89.00, 4, "A swivel chair with 5 wheels and a blue seat."),
    Product(24, "Letter Tray", "office", 11.25, 15, "A bamboo letter tray with 3 stacked shelves."),
)

THREADS = (
    Thread(1, "Best soil for tomatoes", "Alice", "My tomatoes grow slowly. Which soil do you use?"),
    Thread(2, "Kettle stopped working", "Dana", "My kettle stopped heating after 2 years. Any fix?"),
    Thread(3, "Favourite pen for notes", "Farah", "I need a pen that does not smudge."),
    Thread(4, "Weekend hiking trip", "Jonas", "Who wants to hike the north ridge on Saturday?"),
    Thread(5, "Book club picks", "Leo", "This month we read a mystery novel. Suggest the next book."),
    Thread(6, "Lost cat near the park", "Omar", "My grey cat went missing on Friday near the park."),
    Thread(7, "Bread that stays flat", "Quinn", "My bread stays flat after 3 hours of rising. Which flour works?"),
    Thread(8, "Birds at my feeder", "Rosa", "A robin visits my feeder every morning at 7."),
    Thread(9, "Desk lamp too bright", "Sven", "My new desk lamp hurts my eyes after an hour."),
    Thread(10, "Camping at Lake Varden", "Tariq", "We plan to camp at Lake Varden for 4 nights in July."),
    Thread(11, "Quick soup ideas", "Uma", "I want a soup that cooks in 30 minutes."),
    Thread(12, "Chess club on Tuesdays", "Vera", "The chess club meets at 6 in the library every Tuesday."),
    Thread(13, "Flat bike tyre", "Wes", "My back tyre goes flat every 2 days."),
    Thread(14, "Learning to paint", "Xavi", "I started painting with watercolours last month."),
    Thread(15, "Noisy neighbours", "Yusuf", "My neighbours play music until 2 in the morning."),
    Thread(16, "Old photos of Brisa", "Zoe", "I found 30 photos of Brisa from 1950 in my attic."),
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
    Post(11, 7, "Abel", "Strong bread flour works best for me."),
    Post(12, 8, "Bea", "Blue tits come to mine."),
    Post(13, 8, "Carlos", "Hang the feeder near a hedge."),
    Post(14, 9, "Dimitri", "Try a warm white bulb."),
    Post(15, 10, "Esme", "Bring a warm jacket for the nights."),
    Post(16, 11, "Felix", "Lentil soup is quick and filling."),
    Post(17, 12, "Greta", "Can beginners join too?"),
    Post(18, 12, "Hugo", "I will bring a second board."),
    Post(19, 13, "Ines", "Look for a thorn stuck in the tyre."),
    Post(20, 14, "Jade", "Start with small paintings of fruit."),
    Post(21, 15, "Karim", "Talk to them on a quiet afternoon."),
    Post(22, 16, "Luca", "The museum in Brisa would love them."),
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
    Article("port-lune", "Port Lune", "Port Lune is a fishing town on the west coast of Eldmark. Its lighthouse "
            "is painted green and was lit in 1843. About 9000 people live there."),
    Article("tarnby", "Tarnby", "Tarnby is a village at the foot of Mount Tarn. Its school opened in 1921 with "
            "35 pupils."),
    Article("river-sella", "River Sella", "The River Sella flows from Mount Tarn into Lake Varden. It is 118 km "
            "long. Its water turns brown every April when the snow melts."),
    Article("royal-library", "Royal Library", "The Royal Library stands in the centre of Brisa and holds 80000 "
            "books. Its first librarian was Irma Dahl."),
    Article("flag-of-eldmark", "Flag of Eldmark", "The flag of Eldmark is purple with a white star. It was "
            "adopted in 1848. The star has 7 points."),
    Article("snow-hare", "Snow Hare", "The snow hare lives on the slopes of Mount Tarn. Its fur turns white in "
            "November. An adult weighs about 3 kg."),
    Article("coast-railway", "Coast Railway", "The Coast Railway links Brisa and Port Lune. It opened in 1905 and "
            "has 11 stations. Its trains are painted blue."),
    Article("harvest-day", "Harvest Day", "Harvest Day is a holiday in Eldmark on the first Monday of October. "
            "People eat glimmerfruit pie on that day. It became a holiday in 1931."),
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
