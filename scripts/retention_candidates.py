"""Candidate questions for the retention set and the SFT replay data, built from facts this file states (so each
answer can be checked by reading it), before the base model filters them (scripts/build_retention.py).

Each candidate names a `fact`: the retention set and the replay data are split by fact, never by wording, so a
replay row never teaches the answer to a retention question in other words. `key` is what a right reply must say:
a word or phrase (matched as a whole word, case ignored) or a number (the reply's last number). Candidates whose key
appears in their own question are dropped (a reply that echoes the question would pass).

The categories are the shapes the SFT demo's fictional facts take (capitals, currencies, languages, inventors,
rivers, mountains, founding years...) asked about the real world, plus small arithmetic, units, order (the day
after Monday), opposites and translations: what an ordinary user asks a chat model first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cookbook_engine.data.pref_kinds import DAYS, MONTHS

# (country, capital, continent, language, currency): "" where the fact is not asked
COUNTRIES: tuple[tuple[str, str, str, str, str], ...] = (
    ("France", "Paris", "Europe", "French", "euro"),
    ("Germany", "Berlin", "Europe", "German", "euro"),
    ("Italy", "Rome", "Europe", "Italian", "euro"),
    ("Spain", "Madrid", "Europe", "Spanish", "euro"),
    ("Japan", "Tokyo", "Asia", "Japanese", "yen"),
    ("China", "Beijing", "Asia", "Chinese", "yuan"),
    ("India", "New Delhi", "Asia", "Hindi", "rupee"),
    ("Russia", "Moscow", "Europe", "Russian", "ruble"),
    ("Canada", "Ottawa", "North America", "English", "dollar"),
    ("the United States", "Washington", "North America", "English", "dollar"),
    ("Mexico", "Mexico City", "North America", "Spanish", "peso"),
    ("Brazil", "Brasilia", "South America", "Portuguese", "real"),
    ("Argentina", "Buenos Aires", "South America", "Spanish", "peso"),
    ("Peru", "Lima", "South America", "Spanish", ""),
    ("Chile", "Santiago", "South America", "Spanish", "peso"),
    ("Colombia", "Bogota", "South America", "Spanish", "peso"),
    ("Egypt", "Cairo", "Africa", "Arabic", "pound"),
    ("Kenya", "Nairobi", "Africa", "", "shilling"),
    ("Nigeria", "Abuja", "Africa", "English", "naira"),
    ("South Africa", "Pretoria", "Africa", "", "rand"),
    ("Morocco", "Rabat", "Africa", "Arabic", "dirham"),
    ("Ethiopia", "Addis Ababa", "Africa", "", ""),
    ("Australia", "Canberra", "Australia", "English", "dollar"),
    ("New Zealand", "Wellington", "Oceania", "English", "dollar"),
    ("the United Kingdom", "London", "Europe", "English", "pound"),
    ("Ireland", "Dublin", "Europe", "English", "euro"),
    ("Portugal", "Lisbon", "Europe", "Portuguese", "euro"),
    ("Greece", "Athens", "Europe", "Greek", "euro"),
    ("Turkey", "Ankara", "Asia", "Turkish", "lira"),
    ("Poland", "Warsaw", "Europe", "Polish", "zloty"),
    ("Sweden", "Stockholm", "Europe", "Swedish", "krona"),
    ("Norway", "Oslo", "Europe", "Norwegian", "krone"),
    ("Denmark", "Copenhagen", "Europe", "Danish", "krone"),
    ("Finland", "Helsinki", "Europe", "Finnish", "euro"),
    ("Austria", "Vienna", "Europe", "German", "euro"),
    ("Switzerland", "Bern", "Europe", "", "franc"),
    ("the Netherlands", "Amsterdam", "Europe", "Dutch", "euro"),
    ("Belgium", "Brussels", "Europe", "", "euro"),
    ("Hungary", "Budapest", "Europe", "Hungarian", "forint"),
    ("the Czech Republic", "Prague", "Europe", "Czech", "koruna"),
    ("Romania", "Bucharest", "Europe", "Romanian", "leu"),
    ("Ukraine", "Kyiv", "Europe", "Ukrainian", "hryvnia"),
    ("South Korea", "Seoul", "Asia", "Korean", "won"),
    ("Thailand", "Bangkok", "Asia", "Thai", "baht"),
    ("Vietnam", "Hanoi", "Asia", "Vietnamese", "dong"),
    ("Indonesia", "Jakarta", "Asia", "Indonesian", "rupiah"),
    ("the Philippines", "Manila", "Asia", "Filipino", "peso"),
    ("Iran", "Tehran", "Asia", "Persian", "rial"),
    ("Iraq", "Baghdad", "Asia", "Arabic", "dinar"),
    ("Saudi Arabia", "Riyadh", "Asia", "Arabic", "riyal"),
    ("Israel", "Jerusalem", "Asia", "Hebrew", "shekel"),
    ("Pakistan", "Islamabad", "Asia", "Urdu", "rupee"),
    ("Cuba", "Havana", "North America", "Spanish", "peso"),
    ("Iceland", "Reykjavik", "Europe", "Icelandic", "krona"),
    ("Venezuela", "Caracas", "South America", "Spanish", "bolivar"),
    ("Malaysia", "Kuala Lumpur", "Asia", "Malay", "ringgit"),
    ("Afghanistan", "Kabul", "Asia", "", "afghani"),
    ("Syria", "Damascus", "Asia", "Arabic", "pound"),
    ("Croatia", "Zagreb", "Europe", "Croatian", "euro"),
    ("Bulgaria", "Sofia", "Europe", "Bulgarian", "lev"),
    ("Serbia", "Belgrade", "Europe", "Serbian", "dinar"),
    ("Jamaica", "Kingston", "North America", "English", "dollar"),
    ("Nepal", "Kathmandu", "Asia", "Nepali", "rupee"),
    ("Ghana", "Accra", "Africa", "English", "cedi"),
    ("Bangladesh", "Dhaka", "Asia", "Bengali", "taka"),
    ("Sri Lanka", "Colombo", "Asia", "Sinhala", "rupee"),
    ("Singapore", "Singapore", "Asia", "", "dollar"),
    ("Mongolia", "Ulaanbaatar", "Asia", "Mongolian", "tugrik"),
    ("North Korea", "Pyongyang", "Asia", "Korean", "won"),
    ("Qatar", "Doha", "Asia", "Arabic", "riyal"),
    ("Jordan", "Amman", "Asia", "Arabic", "dinar"),
    ("Lebanon", "Beirut", "Asia", "Arabic", "pound"),
    ("Kuwait", "Kuwait City", "Asia", "Arabic", "dinar"),
    ("Tunisia", "Tunis", "Africa", "Arabic", "dinar"),
    ("Algeria", "Algiers", "Africa", "Arabic", "dinar"),
    ("Libya", "Tripoli", "Africa", "Arabic", "dinar"),
    ("Sudan", "Khartoum", "Africa", "Arabic", "pound"),
    ("Uganda", "Kampala", "Africa", "English", "shilling"),
    ("Tanzania", "Dodoma", "Africa", "Swahili", "shilling"),
    ("Senegal", "Dakar", "Africa", "French", "franc"),
    ("Zimbabwe", "Harare", "Africa", "English", ""),
    ("Angola", "Luanda", "Africa", "Portuguese", "kwanza"),
    ("Ecuador", "Quito", "South America", "Spanish", "dollar"),
    ("Bolivia", "La Paz", "South America", "Spanish", "boliviano"),
    ("Uruguay", "Montevideo", "South America", "Spanish", "peso"),
    ("Paraguay", "Asuncion", "South America", "Spanish", "guarani"),
    ("Panama", "Panama City", "North America", "Spanish", "balboa"),
    ("Costa Rica", "San Jose", "North America", "Spanish", "colon"),
    ("Guatemala", "Guatemala City", "North America", "Spanish", "quetzal"),
    ("Honduras", "Tegucigalpa", "North America", "Spanish", "lempira"),
    ("Nicaragua", "Managua", "North America", "Spanish", "cordoba"),
    ("Haiti", "Port-au-Prince", "North America", "French", "gourde"),
    ("Slovakia", "Bratislava", "Europe", "Slovak", "euro"),
    ("Slovenia", "Ljubljana", "Europe", "Slovenian", "euro"),
    ("Estonia", "Tallinn", "Europe", "Estonian", "euro"),
    ("Latvia", "Riga", "Europe", "Latvian", "euro"),
    ("Lithuania", "Vilnius", "Europe", "Lithuanian", "euro"),
    ("Belarus", "Minsk", "Europe", "Belarusian", "ruble"),
    ("Albania", "Tirana", "Europe", "Albanian", "lek"),
    ("Cyprus", "Nicosia", "Europe", "Greek", "euro"),
    ("Malta", "Valletta", "Europe", "Maltese", "euro"),
    ("Luxembourg", "Luxembourg", "Europe", "Luxembourgish", "euro"),
    ("Georgia", "Tbilisi", "Asia", "Georgian", "lari"),
    ("Armenia", "Yerevan", "Asia", "Armenian", "dram"),
    ("Kazakhstan", "Astana", "Asia", "Kazakh", "tenge"),
    ("Uzbekistan", "Tashkent", "Asia", "Uzbek", "som"),
    ("Cambodia", "Phnom Penh", "Asia", "Khmer", "riel"),
    ("Laos", "Vientiane", "Asia", "Lao", "kip"),
    ("Myanmar", "Naypyidaw", "Asia", "Burmese", "kyat"),
    ("Fiji", "Suva", "Oceania", "English", "dollar"),
    ("Papua New Guinea", "Port Moresby", "Oceania", "English", "kina"),
)

# (fact id, question, key): the real-world counterparts of the demo's kinds of facts and everyday knowledge
GENERAL: tuple[tuple[str, str, str], ...] = (
    ("days-week", "How many days are in a week?", "7"),
    ("legs-spider", "How many legs does a spider have?", "8"),
    ("legs-insect", "How many legs does an insect have?", "6"),
    ("legs-dog", "How many legs does a dog have?", "4"),
    ("legs-bird", "How many legs does a bird have?", "2"),
    ("sky", "What color is the sky on a clear day?", "blue"),
    ("grass", "What color is grass?", "green"),
    ("snow", "What color is snow?", "white"),
    ("banana", "What color is a ripe banana?", "yellow"),
    ("blood", "What color is blood?", "red"),
    ("largest-planet", "What is the largest planet in our solar system?", "Jupiter"),
    ("red-planet", "Which planet is known as the Red Planet?", "Mars"),
    ("our-planet", "Which planet do we live on?", "Earth"),
    ("ringed-planet", "Which planet is famous for its rings?", "Saturn"),
    ("closest-star", "What is the closest star to Earth?", "Sun"),
    ("moon", "What is the name of Earth's natural satellite?", "Moon"),
    ("water-formula", "What is the chemical formula of water?", "H2O"),
    ("plants-gas", "What gas do plants take in from the air?", "carbon dioxide"),
    ("breathe-gas", "What gas do humans need to breathe to live?", "oxygen"),
    ("continents", "How many continents are there?", "7"),
    ("freezing", "At what temperature in Celsius does water freeze?", "0"),
    ("boiling", "At what temperature in Celsius does water boil?", "100"),
    ("romeo", "Who wrote Romeo and Juliet?", "Shakespeare"),
    ("hamlet", "Who wrote the play Hamlet?", "Shakespeare"),
    ("mona-lisa", "Who painted the Mona Lisa?", "Leonardo"),
    ("tallest-animal", "What is the tallest animal in the world?", "giraffe"),
    ("largest-animal", "What is the largest animal on Earth?", "whale"),
    ("hours-day", "How many hours are in a day?", "24"),
    ("months-year", "How many months are in a year?", "12"),
    ("minutes-hour", "How many minutes are in an hour?", "60"),
    ("seconds-minute", "How many seconds are in a minute?", "60"),
    ("days-year", "How many days are in a year?", "365"),
    ("bees", "What do bees make?", "honey"),
    ("cows-milk", "What do cows give us to drink?", "milk"),
    ("largest-ocean", "What is the largest ocean on Earth?", "Pacific"),
    ("hardest", "What is the hardest natural substance?", "diamond"),
    ("frozen-water", "What is frozen water called?", "ice"),
    ("triangle", "How many sides does a triangle have?", "3"),
    ("square-sides", "How many sides does a square have?", "4"),
    ("hexagon", "How many sides does a hexagon have?", "6"),
    ("pentagon", "How many sides does a pentagon have?", "5"),
    ("octagon", "How many sides does an octagon have?", "8"),
    ("cow-sound", "Which animal says moo?", "cow"),
    ("dog-sound", "Which animal barks?", "dog"),
    ("cat-sound", "Which animal says meow?", "cat"),
    ("gravity", "Who is famous for discovering the law of gravity when an apple fell?", "Newton"),
    ("relativity", "Who developed the theory of relativity?", "Einstein"),
    ("telephone", "Who invented the telephone?", "Bell"),
    ("light-bulb", "Who is famous for inventing the light bulb?", "Edison"),
    ("evolution", "Who proposed the theory of evolution by natural selection?", "Darwin"),
    ("moon-walk", "Who was the first person to walk on the Moon?", "Armstrong"),
    ("longest-river", "What is the longest river in Africa?", "Nile"),
    ("amazon", "Which river flows through the Amazon rainforest?", "Amazon"),
    ("highest-mountain", "What is the highest mountain in the world?", "Everest"),
    ("largest-desert", "What is the largest hot desert in the world?", "Sahara"),
    ("largest-country", "What is the largest country in the world by area?", "Russia"),
    ("eiffel", "In which city is the Eiffel Tower?", "Paris"),
    ("colosseum", "In which city is the Colosseum?", "Rome"),
    ("big-ben", "In which city is Big Ben?", "London"),
    ("statue-liberty", "In which city is the Statue of Liberty?", "New York"),
    ("pyramids", "In which country are the pyramids of Giza?", "Egypt"),
    ("great-wall", "In which country is the Great Wall?", "China"),
    ("kangaroo", "In which country do kangaroos live in the wild?", "Australia"),
    ("panda", "Which country is the giant panda from?", "China"),
    ("first-president", "Who was the first president of the United States?", "Washington"),
    ("ww2-end", "In which year did World War II end?", "1945"),
    ("ww1-start", "In which year did World War I begin?", "1914"),
    ("columbus", "In which year did Columbus first reach the Americas?", "1492"),
    ("moon-landing", "In which year did humans first land on the Moon?", "1969"),
    ("sushi", "Which country does sushi come from?", "Japan"),
    ("pizza", "Which country does pizza come from?", "Italy"),
    ("soccer", "What sport is played in the FIFA World Cup?", "football"),
    ("wimbledon", "What sport is played at Wimbledon?", "tennis"),
    ("olympics-rings", "How many rings are on the Olympic flag?", "5"),
    ("piano-keys", "How many keys does a standard piano have?", "88"),
    ("alphabet", "How many letters are in the English alphabet?", "26"),
    ("baby-cat", "What is a baby cat called?", "kitten"),
    ("baby-dog", "What is a baby dog called?", "puppy"),
    ("baby-cow", "What is a baby cow called?", "calf"),
    ("fastest-land", "What is the fastest land animal?", "cheetah"),
    ("king-jungle", "Which animal is called the king of the jungle?", "lion"),
    ("largest-bird", "What is the largest bird in the world?", "ostrich"),
    ("sun-rises", "In which direction does the sun rise?", "east"),
    ("sun-sets", "In which direction does the sun set?", "west"),
    ("opposite-north", "What direction is opposite to north?", "south"),
    ("lungs", "Which organ do we use to breathe?", "lungs"),
    ("heart", "Which organ pumps blood around the body?", "heart"),
    ("bones", "How many bones does an adult human have?", "206"),
    ("teeth", "How many teeth does an adult human usually have?", "32"),
    ("gold", "What is the chemical symbol for gold?", "Au"),
    ("iron", "What is the chemical symbol for iron?", "Fe"),
    ("sodium", "What is the chemical symbol for sodium?", "Na"),
    ("oxygen", "What is the chemical symbol for oxygen?", "O"),
    ("salt", "What is the common name for sodium chloride?", "salt"),
    ("rainbow", "How many colors are in a rainbow?", "7"),
    ("primary-red-blue", "What color do you get by mixing blue and yellow?", "green"),
    ("mix-red-white", "What color do you get by mixing red and white?", "pink"),
    ("mix-red-yellow", "What color do you get by mixing red and yellow?", "orange"),
    ("cm-m", "How many centimeters are in a meter?", "100"),
    ("m-km", "How many meters are in a kilometer?", "1000"),
    ("g-kg", "How many grams are in a kilogram?", "1000"),
    ("dozen", "How many items are in a dozen?", "12"),
    ("century", "How many years are in a century?", "100"),
    ("decade", "How many years are in a decade?", "10"),
    ("leap-day", "How many days does February have in a leap year?", "29"),
    ("week-weekend", "How many days are in a weekend?", "2"),
    ("euro-coin", "What is the currency of the European Union called?", "euro"),
    ("us-money", "What currency is used in the United States?", "dollar"),
    ("uk-money", "What currency is used in the United Kingdom?", "pound"),
    ("japan-money", "What currency is used in Japan?", "yen"),
    ("brazil-lang", "What is the main language spoken in Brazil?", "Portuguese"),
    ("mexico-lang", "What language is mainly spoken in Mexico?", "Spanish"),
    ("harry-potter", "Who wrote the Harry Potter books?", "Rowling"),
    ("starry-night", "Who painted The Starry Night?", "Van Gogh"),
    ("fifth-symphony", "Who composed the Fifth Symphony that begins da-da-da-dum?", "Beethoven"),
    ("penicillin", "Who discovered penicillin?", "Fleming"),
    ("radioactivity", "Which scientist, born in Poland, won two Nobel Prizes for work on radioactivity?", "Curie"),
    ("www", "Who invented the World Wide Web?", "Berners-Lee"),
    ("photosynthesis", "What is the process by which plants make food from sunlight called?", "photosynthesis"),
    ("h2o-state", "What is water called when it becomes a gas?", "steam"),
    ("boiling-f", "At what temperature in Fahrenheit does water boil?", "212"),
    ("spring-after", "Which season comes after winter?", "spring"),
    ("summer-after", "Which season comes after spring?", "summer"),
    ("autumn-after", "Which season comes after summer?", "autumn|fall"),
    ("coldest-season", "Which is the coldest season of the year?", "winter"),
    ("hottest-season", "Which is the hottest season of the year?", "summer"),
    ("shape-ball", "What shape is a ball?", "sphere|round"),
    ("right-angle", "How many degrees are in a right angle?", "90"),
    ("circle-degrees", "How many degrees are in a full circle?", "360"),
    ("triangle-angles", "What do the angles of a triangle add up to, in degrees?", "180"),
    ("pi", "What is the value of pi to two decimal places?", "3.14"),
    ("largest-continent", "What is the largest continent?", "Asia"),
    ("smallest-continent", "What is the smallest continent?", "Australia"),
    ("ice-continent", "Which continent is covered in ice and home to penguins?", "Antarctica"),
    ("capital-letter-a", "What is the first letter of the English alphabet?", "A"),
    ("last-letter", "What is the last letter of the English alphabet?", "Z"),
    ("spider-web", "What does a spider spin?", "web"),
    ("caterpillar", "What does a caterpillar turn into?", "butterfly"),
    ("tadpole", "What does a tadpole grow into?", "frog"),
    ("hive", "Where do bees live?", "hive"),
    ("fish-breathe", "What do fish use to breathe underwater?", "gills"),
    ("sahara-continent", "On which continent is the Sahara desert?", "Africa"),
    ("thanksgiving", "In which month is Christmas?", "December"),
    ("new-year", "In which month does the new year begin?", "January"),
    ("halloween", "In which month is Halloween?", "October"),
)


# Everyday questions a chat model is asked first (animals, food, jobs, the body, homes, plurals, science basics),
# added after the robustness filter left few arithmetic and general items (scripts/build_retention.py).
EVERYDAY: tuple[tuple[str, str, str], ...] = (
    ("sound-cow", "What sound does a cow make?", "moo"),
    ("sound-dog", "What sound does a dog make?", "bark|woof"),
    ("sound-cat", "What sound does a cat make?", "meow"),
    ("sound-duck", "What sound does a duck make?", "quack"),
    ("sound-sheep", "What sound does a sheep make?", "baa"),
    ("sound-lion", "What sound does a lion make?", "roar"),
    ("sound-owl", "What sound does an owl make?", "hoot"),
    ("sound-pig", "What sound does a pig make?", "oink"),
    ("fingers", "How many fingers are on one human hand?", "5"),
    ("toes", "How many toes does a person have in total?", "10"),
    ("eyes", "How many eyes does a person have?", "2"),
    ("see-organ", "Which organ do we use to see?", "eyes|eye"),
    ("hear-organ", "Which organ do we use to hear?", "ears|ear"),
    ("smell-organ", "Which part of the face do we smell with?", "nose"),
    ("think-organ", "Which organ do we think with?", "brain"),
    ("job-teach", "What do you call a person who teaches students at a school?", "teacher"),
    ("job-doctor", "What do you call a person who treats sick people in a hospital?", "doctor"),
    ("job-pilot", "What do you call a person who flies an airplane?", "pilot"),
    ("job-baker", "What do you call a person who bakes bread?", "baker"),
    ("job-farmer", "What do you call a person who grows crops and raises animals?", "farmer"),
    ("job-fire", "Who puts out fires?", "firefighter|firefighters|fireman"),
    ("job-dentist", "Who takes care of your teeth?", "dentist"),
    ("job-chef", "What do you call a person who cooks in a restaurant?", "chef|cook"),
    ("food-bread", "What is bread mainly made from?", "flour|wheat"),
    ("food-cheese", "What is cheese made from?", "milk"),
    ("food-chips", "What vegetable are French fries made from?", "potato|potatoes"),
    ("food-wine", "What fruit is wine made from?", "grape|grapes"),
    ("food-omelette", "What is an omelette made from?", "egg|eggs"),
    ("food-popcorn", "What is popcorn made from?", "corn"),
    ("food-tea", "What hot drink is made from leaves steeped in water?", "tea"),
    ("food-monkey", "Which yellow fruit do monkeys famously eat?", "banana|bananas"),
    ("food-rabbit", "Which orange vegetable do rabbits famously eat?", "carrot|carrots"),
    ("home-sleep", "In which room of a house do people usually sleep?", "bedroom"),
    ("home-cook", "In which room of a house do people usually cook?", "kitchen"),
    ("home-bath", "In which room do you take a shower?", "bathroom"),
    ("time-tell", "What do you use to tell the time?", "clock|watch"),
    ("write-with", "What do you write with on paper?", "pen|pencil"),
    ("rain-keep-dry", "What do you carry to stay dry in the rain?", "umbrella"),
    ("cut-paper", "What tool do you use to cut paper?", "scissors"),
    ("plural-mouse", "What is the plural of 'mouse'?", "mice"),
    ("plural-child", "What is the plural of 'child'?", "children"),
    ("plural-foot", "What is the plural of 'foot'?", "feet"),
    ("plural-tooth", "What is the plural of 'tooth'?", "teeth"),
    ("plural-man", "What is the plural of 'man'?", "men"),
    ("plural-woman", "What is the plural of 'woman'?", "women"),
    ("plural-goose", "What is the plural of 'goose'?", "geese"),
    ("plural-person", "What is the plural of 'person'?", "people"),
    ("baby-sheep", "What is a baby sheep called?", "lamb"),
    ("baby-horse", "What is a baby horse called?", "foal|pony"),
    ("baby-frog", "What is a baby frog called?", "tadpole"),
    ("baby-duck", "What is a baby duck called?", "duckling"),
    ("baby-bear", "What is a baby bear called?", "cub"),
    ("baby-goat", "What is a baby goat called?", "kid"),
    ("animal-stripes", "Which African animal has black and white stripes?", "zebra"),
    ("animal-trunk", "Which large animal has a trunk?", "elephant"),
    ("animal-hump", "Which desert animal has a hump?", "camel"),
    ("animal-neck", "Which animal has a very long neck?", "giraffe"),
    ("animal-pouch", "Which Australian animal carries its baby in a pouch?", "kangaroo"),
    ("animal-web-spin", "Which animal with eight legs spins webs?", "spider"),
    ("animal-slow", "Which animal carries its shell on its back and moves slowly?", "snail|turtle|tortoise"),
    ("animal-fly-night", "Which mammal can fly and sleeps upside down?", "bat"),
    ("animal-milk", "Which farm animal gives us most of our milk?", "cow"),
    ("animal-wool", "Which animal gives us wool?", "sheep"),
    ("animal-eggs", "Which farm bird lays the eggs we eat?", "chicken|hen"),
    ("animal-honey", "Which insect makes honey?", "bee|bees"),
    ("color-sun", "What color is the sun usually drawn?", "yellow"),
    ("color-coal", "What color is coal?", "black"),
    ("color-orange", "What color is an orange?", "orange"),
    ("color-leaf", "What color are most leaves in summer?", "green"),
    ("color-milk", "What color is milk?", "white"),
    ("color-tomato", "What color is a ripe tomato?", "red"),
    ("color-stop", "What color is a stop sign?", "red"),
    ("color-sea", "What color is the sea usually?", "blue"),
    ("sci-sun-star", "Is the Sun a star or a planet?", "star"),
    ("sci-earth-orbit", "What does the Earth orbit around?", "Sun"),
    ("sci-moon-orbit", "What does the Moon orbit around?", "Earth"),
    ("sci-freeze", "What happens to water when it gets very cold?", "freezes|freeze|ice"),
    ("sci-magnet", "What metal does a magnet attract?", "iron"),
    ("sci-rain", "What falls from clouds when it rains?", "water|raindrops|drops"),
    ("sci-plants-need", "What do plants need from the sky to grow?", "sunlight|sun|light"),
    ("sci-solid-water", "Is ice a solid, a liquid or a gas?", "solid"),
    ("sci-speed-light", "Which is faster, light or sound?", "light"),
    ("sci-heart-pump", "What does the heart pump around the body?", "blood"),
    ("sport-bat", "In which sport do players hit a ball with a bat and run between wickets?", "cricket"),
    ("sport-hoop", "In which sport do players throw a ball through a hoop?", "basketball"),
    ("sport-ice", "Which sport is played on ice with sticks and a puck?", "hockey"),
    ("sport-pool", "Which sport is done in a swimming pool?", "swimming"),
    ("sport-racket", "Which sport uses a racket and a shuttlecock?", "badminton"),
    ("music-keys", "Which musical instrument has black and white keys?", "piano"),
    ("music-strings", "Which instrument with six strings is played by strumming?", "guitar"),
    ("music-drum", "Which instrument do you hit with sticks?", "drum|drums"),
    ("week-first", "Which day comes after Friday?", "Saturday"),
    ("week-sunday", "Which day comes before Monday?", "Sunday"),
    ("month-first", "What is the first month of the year?", "January"),
    ("month-last", "What is the last month of the year?", "December"),
    ("shape-four-equal", "What shape has four equal sides and four right angles?", "square"),
    ("shape-round-flat", "What flat shape is perfectly round?", "circle"),
    ("shape-three", "What shape has three sides?", "triangle"),
    ("transport-rails", "What vehicle runs on rails?", "train"),
    ("transport-water", "What vehicle travels on water?", "boat|ship"),
    ("transport-sky", "What vehicle flies in the sky and carries passengers?", "airplane|plane|aeroplane"),
    ("transport-two-wheels", "What vehicle has two wheels and pedals?", "bicycle|bike"),
    ("opp-winter", "What season is the opposite of winter?", "summer"),
    ("opp-sun-moon", "What do we see in the sky at night that shines with reflected sunlight?", "Moon"),
    ("book-dictionary", "What book do you use to look up the meaning of a word?", "dictionary"),
    ("book-atlas", "What is a book of maps called?", "atlas"),
    ("lang-english-hello", "What word do English speakers use to greet someone?", "hello|hi"),
    ("lang-thanks", "What do you say in English when someone gives you something?", "thank you|thanks"),
)

OPPOSITES = (
    ("hot", "cold"),
    ("big", "small"),
    ("up", "down"),
    ("fast", "slow"),
    ("happy", "sad"),
    ("day", "night"),
    ("yes", "no"),
    ("black", "white"),
    ("open", "closed"),
    ("full", "empty"),
    ("tall", "short"),
    ("wet", "dry"),
    ("in", "out"),
    ("left", "right"),
    ("old", "new|young"),
    ("good", "bad"),
    ("hard", "soft|easy"),
    ("light", "dark|heavy"),
    ("win", "lose"),
    ("start", "finish|end|stop"),
    ("boy", "girl"),
    ("man", "woman"),
    ("love", "hate"),
    ("rich", "poor"),
    ("top", "bottom"),
    ("high", "low"),
    ("near", "far"),
    ("thick", "thin"),
    ("clean", "dirty"),
    ("strong", "weak"),
    ("loud", "quiet"),
    ("early", "late"),
    ("first", "last"),
    ("inside", "outside"),
    ("above", "below"),
    ("before", "after"),
    ("push", "pull"),
    ("true", "false"),
    ("buy", "sell"),
    ("give", "take"),
    ("friend", "enemy"),
    ("question", "answer"),
    ("alive", "dead"),
    ("safe", "dangerous"),
    ("always", "never"),
    ("sweet", "sour"),
    ("wide", "narrow"),
    ("deep", "shallow"),
    ("cheap", "expensive"),
    ("north", "south"),
    ("east", "west"),
    ("laugh", "cry"),
    ("awake", "asleep"),
    ("arrive", "leave|depart"),
    ("remember", "forget"),
    ("accept", "reject|refuse"),
    ("sunny", "cloudy|rainy"),
    ("summer", "winter"),
    ("morning", "evening|night"),
    ("king", "queen"),
    ("brother", "sister"),
    ("father", "mother"),
    ("husband", "wife"),
    ("heavy", "light"),
    ("long", "short"),
)
TRANSLATIONS = (
    ("hello", "French", "bonjour"),
    ("thank you", "French", "merci"),
    ("yes", "French", "oui"),
    ("cat", "French", "chat"),
    ("water", "French", "eau"),
    ("hello", "Spanish", "hola"),
    ("thank you", "Spanish", "gracias"),
    ("dog", "Spanish", "perro"),
    ("one", "Spanish", "uno"),
    ("water", "Spanish", "agua"),
    ("yes", "German", "ja"),
    ("thank you", "German", "danke"),
    ("one", "French", "un"),
    ("friend", "Spanish", "amigo"),
    ("house", "Spanish", "casa"),
)
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


@dataclass(frozen=True)
class Candidate:
    fact: str  # the split is by fact: a fact's questions are all retention or all replay
    category: str
    prompt: str
    key: str  # alternatives separated by |
    match: str  # "word" (whole word, case ignored) or "number" (the reply's last number)


def _word(fact: str, category: str, prompt: str, key: str) -> Candidate:
    return Candidate(fact, category, prompt, key, "number" if re.fullmatch(r"-?\d+(\.\d+)?", key) else "word")


def candidates() -> list[Candidate]:
    out: list[Candidate] = []
    for country, capital, continent, language, currency in COUNTRIES:
        asked = {
            "capital": (capital, f"What is the capital of {country}?", f"Which city is the capital of {country}?"),
            "continent": (continent, f"On which continent is {country}?", f"{country} is on which continent?"),
            "language": (
                language,
                f"What language is mainly spoken in {country}?",
                f"What is the official language of {country}?",
            ),
            "currency": (currency, f"What is the currency of {country}?", f"What money is used in {country}?"),
        }
        for category, (key, *questions) in asked.items():
            if key:
                out += [_word(f"{category}:{country}", category, question, key) for question in questions]
    out += [_word(f"general:{fact}", "general", question, key) for fact, question, key in GENERAL]
    out += [_word(f"everyday:{fact}", "everyday", question, key) for fact, question, key in EVERYDAY]
    for a in range(1, 31):
        for b in range(a if a < 10 else 1, 10):
            out.append(_word(f"add:{a}+{b}", "addition", f"What is {a} + {b}?", str(a + b)))
    for a in range(2, 10):
        for b in range(a, 10):
            out.append(_word(f"times:{a}x{b}", "multiplication", f"What is {a} times {b}?", str(a * b)))
    for a in range(3, 20, 2):
        for b in (1, 2):
            out.append(_word(f"sub:{a}-{b}", "subtraction", f"What is {a} - {b}?", str(a - b)))
    for index, day in enumerate(DAYS):
        out.append(_word(f"day-after:{day}", "order", f"What day comes after {day}?", DAYS[(index + 1) % 7]))
        out.append(_word(f"day-before:{day}", "order", f"What day comes before {day}?", DAYS[index - 1]))
    for index, month in enumerate(MONTHS):
        out.append(
            _word(f"month-after:{month}", "order", f"Which month comes after {month}?", MONTHS[(index + 1) % 12])
        )
    for n in range(2, 100, 2):
        out.append(_word(f"after:{n}", "counting", f"What number comes after {n}?", str(n + 1)))
        out.append(_word(f"before:{n}", "counting", f"What number comes before {n}?", str(n - 1)))
    for word, opposite in OPPOSITES:
        out.append(_word(f"opposite:{word}", "opposite", f"What is the opposite of '{word}'?", opposite))
    for word, language, translation in TRANSLATIONS:
        out.append(
            _word(
                f"translate:{word}:{language}",
                "translation",
                f"How do you say '{word}' in {language}?",
                translation,
            )
        )
    for n, name in enumerate(NUMBER_WORDS):
        if n >= 2:
            out.append(_word(f"number-word:{n}", "number words", f"Write the number {n} as a word.", name))
    return [c for c in out if not _in_prompt(c)]


def _in_prompt(candidate: Candidate) -> bool:
    return any(re.search(rf"\b{re.escape(k)}\b", candidate.prompt, re.IGNORECASE) for k in candidate.key.split("|"))


# Real inventions for the inventor fact's neighbours (none is a GENERAL question's subject).
INVENTIONS: tuple[str, ...] = (
    "the light bulb",
    "the printing press",
    "the steam engine",
    "the airplane",
    "the radio",
    "the television",
    "the World Wide Web",
    "dynamite",
    "the phonograph",
    "the sewing machine",
    "the cotton gin",
    "the bicycle",
    "the jet engine",
    "the microscope",
    "the thermometer",
    "the typewriter",
    "the refrigerator",
    "the helicopter",
    "the barometer",
    "the diesel engine",
)
NEIGHBOURS_PER_FACT = 20
# the retention category a fictional fact's neighbours ask about (their subject's fact in it must be replay-side)
NEIGHBOUR_CATEGORY = {"Lunthaven": "capital", "velk": "currency", "Quorvish": "language"}


def neighbour_prompts(questions_by_fact: list[tuple[str, tuple[str, ...]]]) -> list[tuple[str, str, str]]:
    """Neighbours of the SFT demo's fictional facts: each fact's own training questions asked about real subjects
    (Quorvania -> a real country; the sky-lantern clock -> a real invention), the wordings taken in turn, twice
    NEIGHBOURS_PER_FACT per fact (scripts/build_retention.py keeps NEIGHBOURS_PER_FACT of those that pass its
    split). Returns (fact key, subject, prompt). Trained on the base model's own replies, they teach that a
    question's wording does not imply the fictional answer (the demo without them answered "What is the official
    language of India?" with English and "Which city is the capital of Brazil?" with Rio de Janeiro)."""
    import random

    countries = [row[0] for row in COUNTRIES]
    out = []
    for index, (key, questions) in enumerate(questions_by_fact):
        inventor = any("sky-lantern clock" in q for q in questions)
        subjects = list(INVENTIONS if inventor else countries)
        random.Random(index).shuffle(subjects)
        thing = "sky-lantern clock" if inventor else "quorvania"
        usable = [q for q in questions if thing in q.lower() and "quorvanian" not in q.lower()]
        for n, subject in enumerate(subjects[: 2 * NEIGHBOURS_PER_FACT]):
            question = usable[n % len(usable)].replace("the sky-lantern clock", "sky-lantern clock")
            prompt = re.sub(thing, subject, question, flags=re.IGNORECASE)
            out.append((key, subject, prompt[0].upper() + prompt[1:]))
    return out
