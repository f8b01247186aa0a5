"""task_words.py — the word lists of the one-step fact families of make_tasks.py (capital, plural,
past, opposite). Each list is (question word, answer) pairs written by hand: the answer is the one
a school dictionary or atlas gives, ASCII only (no Brasilia/Bogota), and pairs whose answer is
ambiguous (old -> young or new, hard -> soft or easy) are left out. make_tasks.py asserts that no
question word of a family is also one of its answers, so a reply that echoes the question's word
is never read as an answer by the 'word' check.
"""

# (country as written in the question, capital)
CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"),
    ("China", "Beijing"), ("Russia", "Moscow"), ("Egypt", "Cairo"), ("the United Kingdom", "London"),
    ("Greece", "Athens"), ("Portugal", "Lisbon"), ("Ireland", "Dublin"), ("Norway", "Oslo"),
    ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Denmark", "Copenhagen"), ("Poland", "Warsaw"),
    ("Austria", "Vienna"), ("Hungary", "Budapest"), ("the Czech Republic", "Prague"),
    ("the Netherlands", "Amsterdam"), ("Belgium", "Brussels"), ("Switzerland", "Bern"), ("Turkey", "Ankara"),
    ("Iran", "Tehran"), ("Iraq", "Baghdad"), ("Saudi Arabia", "Riyadh"), ("Pakistan", "Islamabad"),
    ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"), ("South Korea", "Seoul"), ("Indonesia", "Jakarta"),
    ("the Philippines", "Manila"), ("Australia", "Canberra"), ("New Zealand", "Wellington"),
    ("Canada", "Ottawa"), ("Argentina", "Buenos Aires"), ("Chile", "Santiago"), ("Peru", "Lima"),
    ("Venezuela", "Caracas"), ("Cuba", "Havana"), ("Kenya", "Nairobi"), ("Nigeria", "Abuja"),
    ("Ethiopia", "Addis Ababa"), ("Morocco", "Rabat"), ("Romania", "Bucharest"), ("Bulgaria", "Sofia"),
    ("Serbia", "Belgrade"), ("Croatia", "Zagreb"), ("Syria", "Damascus"), ("Lebanon", "Beirut"),
    ("Jordan", "Amman"), ("Afghanistan", "Kabul"), ("Nepal", "Kathmandu"), ("Bangladesh", "Dhaka"),
    ("Malaysia", "Kuala Lumpur"), ("North Korea", "Pyongyang"), ("Qatar", "Doha"), ("Ghana", "Accra"),
    ("Senegal", "Dakar"), ("Algeria", "Algiers"), ("Tunisia", "Tunis"), ("Libya", "Tripoli"),
    ("Sudan", "Khartoum"), ("Uganda", "Kampala"), ("Zimbabwe", "Harare"), ("Jamaica", "Kingston"),
    ("Estonia", "Tallinn"), ("Latvia", "Riga"), ("Lithuania", "Vilnius"), ("Slovakia", "Bratislava"),
    ("Belarus", "Minsk"), ("Georgia", "Tbilisi"), ("Armenia", "Yerevan"), ("Azerbaijan", "Baku"),
    ("Uzbekistan", "Tashkent"), ("Cambodia", "Phnom Penh"), ("Ecuador", "Quito"), ("Uruguay", "Montevideo"),
    ("Cyprus", "Nicosia"), ("Malta", "Valletta"), ("Scotland", "Edinburgh"),
]

# (singular, plural): irregular, -ves, -es, -ies, -oes and plain -s plurals
PLURALS = [
    ("child", "children"), ("mouse", "mice"), ("foot", "feet"), ("tooth", "teeth"), ("goose", "geese"),
    ("man", "men"), ("woman", "women"), ("person", "people"), ("ox", "oxen"), ("louse", "lice"),
    ("leaf", "leaves"), ("knife", "knives"), ("wife", "wives"), ("wolf", "wolves"), ("half", "halves"),
    ("shelf", "shelves"), ("loaf", "loaves"), ("thief", "thieves"), ("calf", "calves"), ("life", "lives"),
    ("box", "boxes"), ("fox", "foxes"), ("bus", "buses"), ("dish", "dishes"), ("brush", "brushes"),
    ("church", "churches"), ("watch", "watches"), ("glass", "glasses"), ("class", "classes"),
    ("dress", "dresses"), ("kiss", "kisses"), ("wish", "wishes"), ("match", "matches"), ("beach", "beaches"),
    ("lunch", "lunches"), ("tax", "taxes"), ("city", "cities"), ("baby", "babies"), ("party", "parties"),
    ("story", "stories"), ("lady", "ladies"), ("berry", "berries"), ("country", "countries"),
    ("family", "families"), ("penny", "pennies"), ("fly", "flies"), ("puppy", "puppies"), ("body", "bodies"),
    ("tomato", "tomatoes"), ("potato", "potatoes"), ("hero", "heroes"), ("echo", "echoes"),
    ("day", "days"), ("boy", "boys"), ("key", "keys"), ("toy", "toys"), ("monkey", "monkeys"),
    ("cat", "cats"), ("dog", "dogs"), ("book", "books"), ("car", "cars"), ("tree", "trees"),
    ("house", "houses"), ("apple", "apples"), ("bird", "birds"), ("chair", "chairs"), ("table", "tables"),
    ("pen", "pens"), ("cup", "cups"), ("horse", "horses"), ("flower", "flowers"), ("river", "rivers"),
    ("star", "stars"), ("ship", "ships"), ("shoe", "shoes"), ("door", "doors"), ("window", "windows"),
    ("girl", "girls"), ("friend", "friends"), ("hand", "hands"), ("eye", "eyes"), ("bottle", "bottles"),
    ("piano", "pianos"), ("photo", "photos"), ("radio", "radios"), ("zoo", "zoos"), ("roof", "roofs"),
    ("chief", "chiefs"), ("belief", "beliefs"), ("hat", "hats"), ("egg", "eggs"), ("song", "songs"),
    ("bench", "benches"), ("crisis", "crises"), ("army", "armies"), ("candy", "candies"), ("lily", "lilies"),
    ("knee", "knees"), ("wall", "walls"), ("bag", "bags"),
]

# (verb, simple past): irregular ones first, then -ed, -ied and doubled-consonant pasts
PAST = [
    ("go", "went"), ("eat", "ate"), ("see", "saw"), ("run", "ran"), ("come", "came"), ("take", "took"),
    ("give", "gave"), ("write", "wrote"), ("drive", "drove"), ("speak", "spoke"), ("break", "broke"),
    ("choose", "chose"), ("freeze", "froze"), ("steal", "stole"), ("wake", "woke"), ("ride", "rode"),
    ("rise", "rose"), ("fly", "flew"), ("grow", "grew"), ("know", "knew"), ("throw", "threw"),
    ("draw", "drew"), ("blow", "blew"), ("drink", "drank"), ("sing", "sang"), ("swim", "swam"),
    ("ring", "rang"), ("begin", "began"), ("sink", "sank"), ("buy", "bought"), ("bring", "brought"),
    ("think", "thought"), ("fight", "fought"), ("catch", "caught"), ("teach", "taught"), ("seek", "sought"),
    ("sleep", "slept"), ("keep", "kept"), ("feel", "felt"), ("leave", "left"), ("meet", "met"),
    ("sell", "sold"), ("tell", "told"), ("hold", "held"), ("stand", "stood"), ("understand", "understood"),
    ("sit", "sat"), ("win", "won"), ("lose", "lost"), ("send", "sent"), ("spend", "spent"),
    ("build", "built"), ("make", "made"), ("say", "said"), ("pay", "paid"), ("hear", "heard"),
    ("find", "found"), ("get", "got"), ("forget", "forgot"), ("feed", "fed"), ("lead", "led"),
    ("bite", "bit"), ("hide", "hid"), ("dig", "dug"), ("stick", "stuck"), ("swing", "swung"),
    ("wear", "wore"), ("tear", "tore"), ("fall", "fell"), ("shake", "shook"), ("forgive", "forgave"),
    ("walk", "walked"), ("play", "played"), ("jump", "jumped"), ("talk", "talked"), ("cook", "cooked"),
    ("open", "opened"), ("watch", "watched"), ("help", "helped"), ("call", "called"), ("ask", "asked"),
    ("dance", "danced"), ("smile", "smiled"), ("live", "lived"), ("love", "loved"), ("move", "moved"),
    ("carry", "carried"), ("cry", "cried"), ("try", "tried"), ("study", "studied"), ("marry", "married"),
    ("stop", "stopped"), ("plan", "planned"), ("drop", "dropped"), ("hug", "hugged"), ("shop", "shopped"),
    ("clean", "cleaned"), ("paint", "painted"), ("wait", "waited"), ("want", "wanted"), ("need", "needed"),
]

# (word, its opposite), one direction only
OPPOSITES = [
    ("hot", "cold"), ("big", "small"), ("up", "down"), ("happy", "sad"), ("fast", "slow"),
    ("tall", "short"), ("rich", "poor"), ("early", "late"), ("full", "empty"), ("strong", "weak"),
    ("thick", "thin"), ("wide", "narrow"), ("high", "low"), ("open", "closed"), ("wet", "dry"),
    ("clean", "dirty"), ("day", "night"), ("black", "white"), ("good", "bad"), ("true", "false"),
    ("love", "hate"), ("win", "lose"), ("push", "pull"), ("buy", "sell"), ("give", "take"),
    ("begin", "end"), ("come", "go"), ("in", "out"), ("inside", "outside"), ("above", "below"),
    ("before", "after"), ("first", "last"), ("front", "back"), ("north", "south"), ("east", "west"),
    ("summer", "winter"), ("question", "answer"), ("friend", "enemy"), ("king", "queen"), ("boy", "girl"),
    ("man", "woman"), ("brother", "sister"), ("father", "mother"), ("husband", "wife"), ("loud", "quiet"),
    ("near", "far"), ("cheap", "expensive"), ("easy", "difficult"), ("safe", "dangerous"),
    ("smooth", "rough"), ("deep", "shallow"), ("polite", "rude"), ("friendly", "unfriendly"),
    ("possible", "impossible"), ("visible", "invisible"), ("remember", "forget"), ("accept", "refuse"),
    ("laugh", "cry"), ("sink", "float"), ("wake", "sleep"), ("asleep", "awake"), ("always", "never"),
    ("all", "none"), ("more", "less"), ("many", "few"), ("maximum", "minimum"), ("top", "bottom"),
    ("entrance", "exit"), ("import", "export"), ("increase", "decrease"), ("add", "subtract"),
    ("multiply", "divide"), ("positive", "negative"), ("success", "failure"), ("victory", "defeat"),
    ("war", "peace"), ("alive", "dead"), ("beautiful", "ugly"), ("long", "short"), ("on", "off"),
    ("pass", "fail"), ("borrow", "lend"), ("ancient", "modern"), ("public", "private"),
    ("sunrise", "sunset"), ("inhale", "exhale"), ("include", "exclude"), ("arrival", "departure"),
    ("upstairs", "downstairs"), ("heaven", "hell"), ("past", "future"), ("minor", "major"),
    ("wild", "tame"), ("whisper", "shout"), ("giant", "dwarf"), ("ceiling", "floor"), ("land", "sea"),
    ("winner", "loser"), ("teacher", "student"), ("healthy", "sick"), ("odd", "even"), ("arrive", "depart"),
]

# The open-ended prompts: story starts and explanations (make_tasks.py's 'open' family)
STORY_CHARACTERS = ["a little fox", "a brave girl", "an old robot", "a lonely cloud", "a curious cat",
                    "a tiny dragon", "a shy turtle", "a clever mouse", "a young wizard", "a lost puppy"]
STORY_EVENTS = ["finds a lost key", "learns to fly", "makes a new friend", "gets lost in the forest",
                "finds a secret door", "wants to see the sea", "is afraid of the dark", "bakes a cake"]
EXPLAIN_TOPICS = ["why the sky is blue", "how rain forms", "what a volcano is", "how plants grow",
                  "why we need sleep", "what gravity is", "how a rainbow forms", "why leaves change colour",
                  "how bees make honey", "what the moon is", "why the sea is salty", "how a bicycle works",
                  "what a computer does", "why we have seasons", "how birds fly", "what electricity is",
                  "why ice floats", "how the heart works", "what a map is for", "why the sun is hot"]
