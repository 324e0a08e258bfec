import Foundation

/// An HTTP-date (RFC 9110 §5.6.7) as Unix seconds: the preferred IMF-fixdate
/// (`Sun, 06 Nov 1994 08:49:37 GMT`) and the two obsolete forms a recipient must accept,
/// RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime (`Sun Nov  6 08:49:37 1994`).
/// Anything else is `nil` (an invalid `Expires` then means "already expired", RFC 9111 §5.3).
public enum HTTPDate {
    private static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
    private static let shortDays = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    private static let longDays = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]

    public static func parse(_ text: some StringProtocol) -> Double? {
        let s = text.trimmingCharacters(in: [" ", "\t"])
        // One space between parts, as the grammar says (asctime pads a one-digit day with one
        // more: `Nov  6`).
        var words = s.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        if words.count == 6, words[2].isEmpty, words[3].count == 1 { words.remove(at: 2) }
        if words.count == 6, words[0].hasSuffix(","), shortDays.contains(words[0].dropLast().lowercased()), words[5] == "GMT" {
            // IMF-fixdate: day-name "," SP 2DIGIT SP month SP 4DIGIT SP time SP "GMT"
            guard words[1].count == 2, words[3].count == 4, let day = Int(words[1]), let year = Int(words[3]) else { return nil }
            return make(year: year, month: words[2], day: day, time: words[4])
        }
        if words.count == 4, words[0].hasSuffix(","), longDays.contains(words[0].dropLast().lowercased()), words[3] == "GMT" {
            // RFC 850: day-name-l "," SP 2DIGIT "-" month "-" 2DIGIT SP time SP "GMT"
            let parts = words[1].split(separator: "-", omittingEmptySubsequences: false)
            guard parts.count == 3, parts[0].count == 2, parts[2].count == 2, let day = Int(parts[0]), let yy = Int(parts[2]) else { return nil }
            // Two-digit years: the past century when more than 50 years ahead (RFC 9110 §5.6.7).
            return make(year: yy < 70 ? 2000 + yy : 1900 + yy, month: String(parts[1]), day: day, time: words[2])
        }
        if words.count == 5, shortDays.contains(words[0].lowercased()) {
            // asctime: day-name SP month SP ( 2DIGIT / ( SP 1DIGIT )) SP time SP 4DIGIT
            guard words[2].count <= 2, words[4].count == 4, let day = Int(words[2]), let year = Int(words[4]) else { return nil }
            return make(year: year, month: words[1], day: day, time: words[3])
        }
        return nil
    }

    private static func make(year: Int, month: String, day: Int, time: String) -> Double? {
        guard month.count == 3, let m = months.firstIndex(of: month.lowercased()) else { return nil }
        let hms = time.split(separator: ":", omittingEmptySubsequences: false)
        guard hms.count == 3, hms.allSatisfy({ $0.count == 2 && $0.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 } }),
              let h = Int(hms[0]), let mi = Int(hms[1]), let sec = Int(hms[2]),
              h < 24, mi < 60, sec < 61, (1...31).contains(day), year >= 1900 else { return nil }
        return Double(daysFromCivil(year: year, month: m + 1, day: day) * 86_400 + h * 3_600 + mi * 60 + sec)
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    private static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// IMF-fixdate text of Unix seconds.
    public static func format(_ seconds: Double) -> String {
        let total = Int(seconds.rounded(.down))
        let days = Int((Double(total) / 86_400).rounded(.down))
        let rest = total - days * 86_400
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        let weekday = ((days % 7) + 7 + 3) % 7  // 1970-01-01 was a Thursday (index 3 from Monday)
        func two(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }
        let dayName = shortDays[weekday].capitalized
        let monthName = months[month - 1].capitalized
        return "\(dayName), \(two(day)) \(monthName) \(year) \(two(rest / 3_600)):\(two(rest % 3_600 / 60)):\(two(rest % 60)) GMT"
    }
}
